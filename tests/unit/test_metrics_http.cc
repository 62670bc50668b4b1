// metrics/http_server: the endpoints of monitor.h and the security rules,
// through a real CivetWeb server on loopback and a raw-socket client (so the
// request line goes out exactly as written, with no client normalisation).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "metrics/dashboard_assets.h"
#include "metrics/http_server.h"
#include "metrics/monitor.h"

namespace dst::metrics {
namespace {

struct HttpReply {
  int status = 0;                              // 0: no answer (connection failed or timed out)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string &name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// Owns a socket descriptor.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket &) = delete;
  Socket &operator=(const Socket &) = delete;
  Socket(Socket &&other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Sends `request` verbatim to 127.0.0.1:port and reads the answer until the
// server closes (keep-alive is off) or 10 s pass without data.
HttpReply RawRequest(int port, const std::string &request) {
  HttpReply reply;
  Socket s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd() < 0) return reply;
  timeval timeout{10, 0};
  setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(s.fd(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s.fd(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0) return reply;
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(s.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return reply;
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[8192];
  for (ssize_t n; (n = recv(s.fd(), buf, sizeof(buf), 0)) > 0;)
    raw.append(buf, static_cast<size_t>(n));

  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return reply;
  std::istringstream head(raw.substr(0, end));
  std::string line, version;
  std::getline(head, line);
  std::istringstream(line) >> version >> reply.status;
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char &c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    reply.headers[name] = value;
  }
  reply.body = raw.substr(end + 4);
  return reply;
}

HttpReply Request(int port, const std::string &method, const std::string &target,
                  const std::string &extra_headers = "") {
  return RawRequest(port, method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                              "Connection: close\r\n" + extra_headers + "\r\n");
}

HttpReply Get(int port, const std::string &target, const std::string &extra_headers = "") {
  return Request(port, "GET", target, extra_headers);
}

StepSample Sample(int64_t step) {
  StepSample s;
  s.step = step;
  s.samples_total = 8 * step;
  s.loss = 3.0 + 1.0 / static_cast<double>(step);
  s.lr = 1e-3;
  s.step_seconds = 0.3;
  s.timers = {{"forward", 0.1}, {"backward", 0.2}};
  s.comm[0] = {step, step * 4096, 0.001 * static_cast<double>(step), 1e9};
  s.memory[0] = {1 << 20, 1 << 21};
  s.unix_time = 1.7e9 + static_cast<double>(step);
  return s;
}

MonitorOptions HttpOptions(int port = 0, const std::string &token = "") {
  MonitorOptions options;
  options.config.http.enabled = true;
  options.config.http.host = "127.0.0.1";
  options.config.http.port = port;
  options.config.http.token = token;
  options.identity.job = "http_job";
  options.identity.rank = 0;
  options.identity.world_size = 2;
  options.config_json =
      R"({"train_batch_size": 8, "dstrain": {"monitor": {"http": {"token": "plain-secret"}}}})";
  return options;
}

std::unique_ptr<Monitor> Start(const MonitorOptions &options) {
  auto monitor = Monitor::Create(options);
  EXPECT_TRUE(monitor.ok()) << monitor.status().message();
  if (!monitor.ok()) return nullptr;
  EXPECT_GT(monitor.value()->http_port(), 0);
  return std::move(monitor).value();
}

// CivetWeb's threads need enough stack in this process (see
// CheckHttpServerCanRun); when they do not, the environment test below fails
// with the reason and the tests that need a running server skip.
#define SKIP_UNLESS_HTTP_CAN_RUN()                                                    \
  do {                                                                                \
    if (const Status can_run = CheckHttpServerCanRun(); !can_run.ok()) {              \
      GTEST_SKIP() << "MetricsHttpEnvironment.CivetWebThreadsHaveEnoughStack fails: " \
                   << can_run.message();                                              \
    }                                                                                 \
  } while (0)

TEST(MetricsHttpEnvironment, CivetWebThreadsHaveEnoughStack) {
  const Status can_run = CheckHttpServerCanRun();
  if (can_run.message().find("sanitizer build") != std::string::npos)
    GTEST_SKIP() << can_run.message();
  EXPECT_TRUE(can_run.ok()) << can_run.message();
}

TEST(MetricsHttpEnvironment, CreateFailsCleanlyWhenTheServerCannotRun) {
  const Status can_run = CheckHttpServerCanRun();
  auto monitor = Monitor::Create(HttpOptions());
  EXPECT_EQ(monitor.ok(), can_run.ok()) << monitor.status().message();
  if (!can_run.ok() && !monitor.ok()) {
    const bool sanitized = monitor.status().message().find("sanitizer build") != std::string::npos;
    if (!sanitized) {
      EXPECT_NE(monitor.status().message().find("thread-local storage"), std::string::npos);
    }
    EXPECT_NE(monitor.status().message().find("dstrain.monitor.http.enabled"), std::string::npos);
  }
}

class MetricsHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_HTTP_CAN_RUN();
    unsetenv("DSTRAIN_MONITOR_TOKEN");
    monitor_ = Start(HttpOptions());
    ASSERT_TRUE(monitor_);
    port_ = monitor_->http_port();
    for (int64_t step = 1; step <= 5; ++step) ASSERT_TRUE(monitor_->OnStep(Sample(step)).ok());
  }
  std::unique_ptr<Monitor> monitor_;
  int port_ = 0;
};

TEST_F(MetricsHttp, MetricsIsPrometheusText) {
  const HttpReply r = Get(port_, "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type").rfind("text/plain", 0), 0u) << r.header("content-type");
  EXPECT_NE(r.body.find("\ndstrain_loss{"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("job=\"http_job\""), std::string::npos);
  EXPECT_EQ(r.header("content-length"), std::to_string(r.body.size()));
  EXPECT_EQ(r.header("x-content-type-options"), "nosniff");
  EXPECT_EQ(r.header("cache-control"), "no-store");
  // No CORS grant: another web site open in the user's browser cannot read it.
  const HttpReply cross = Get(port_, "/metrics", "Origin: http://other.example\r\n");
  EXPECT_EQ(cross.status, 200);
  EXPECT_EQ(cross.headers.count("access-control-allow-origin"), 0u);
}

// Connects to 127.0.0.1:port and sends `bytes`; the socket stays open.
Socket Hold(int port, const std::string &bytes) {
  Socket s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(s.fd(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(send(s.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  return s;
}

// Sixteen connections that send nothing hold workers until the request
// timeout; a scrape still answers at once (before, two idle connections
// delayed /metrics by 9.5 s and four pushed every scrape past Prometheus'
// default 10 s timeout).
TEST_F(MetricsHttp, IdleConnectionsDoNotStarveAScrape) {
  std::vector<Socket> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(Hold(port_, ""));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // accepted, workers held
  for (int scrape = 0; scrape < 3; ++scrape) {
    const auto start = std::chrono::steady_clock::now();
    const HttpReply r = Get(port_, "/metrics");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(seconds, 1.0) << "scrape " << scrape;
  }
}

double SecondsToScrape(int port, HttpReply *reply) {
  const auto start = std::chrono::steady_clock::now();
  *reply = Get(port, "/metrics");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Three hundred clients that send a request line and a Host header and never
// finish their headers: a scrape still answers within a second, every time,
// and so do more of them (before the front, 64 such clients delayed a scrape
// by 2.7 s and 150 made it time out: each held one of CivetWeb's workers).
TEST_F(MetricsHttp, ClientsThatNeverFinishTheirHeadersDoNotStarveAScrape) {
  std::vector<Socket> slow;
  for (int i = 0; i < 300; ++i)
    slow.push_back(Hold(port_, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int scrape = 0; scrape < 3; ++scrape) {
    HttpReply r;
    const double seconds = SecondsToScrape(port_, &r);
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(seconds, 1.0) << "scrape " << scrape;
    EXPECT_NE(r.body.find("dstrain_loss"), std::string::npos);
  }
  for (int i = 0; i < 300; ++i)
    slow.push_back(Hold(port_, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  HttpReply r;
  EXPECT_LT(SecondsToScrape(port_, &r), 1.0) << "with 600 slow clients";
  EXPECT_EQ(r.status, 200);
}

// The front's bounds: past the per-client bound the oldest unfinished
// requests from that address are closed, newer ones kept; headers past 16 KiB
// are answered 431; the header deadline closes an unfinished request.
TEST(MetricsHttpFront, BoundsDeadlinesAndOversizedHeaders) {
  SKIP_UNLESS_HTTP_CAN_RUN();
  unsetenv("DSTRAIN_MONITOR_TOKEN");
  HttpServerOptions options;
  options.max_pending_per_client = 4;
  options.header_timeout_ms = 500;
  auto server = HttpServer::Start(options, [](const HttpRequest &) {
    HttpResponse r;
    r.body = "{}";
    return r;
  });
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = server.value()->port();
  std::vector<Socket> slow;
  for (int i = 0; i < 6; ++i) slow.push_back(Hold(port, "GET / HTTP/1.1\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto closed = [](const Socket &s) {
    char c;
    const ssize_t n = recv(s.fd(), &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  };
  EXPECT_TRUE(closed(slow[0]));
  EXPECT_TRUE(closed(slow[1]));
  for (int i = 2; i < 6; ++i) EXPECT_FALSE(closed(slow[i])) << i;
  // The held ones finish their request: each is answered.
  for (int i = 4; i < 6; ++i) {
    const std::string rest = "Host: x\r\nConnection: close\r\n\r\n";
    ASSERT_EQ(send(slow[i].fd(), rest.data(), rest.size(), MSG_NOSIGNAL), ssize_t(rest.size()));
    timeval tv{5, 0};
    setsockopt(slow[i].fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string raw;
    char buf[4096];
    for (ssize_t n; (n = recv(slow[i].fd(), buf, sizeof(buf), 0)) > 0;)
      raw.append(buf, size_t(n));
    EXPECT_EQ(raw.rfind("HTTP/1.1 200", 0), 0u) << raw;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // past the header deadline
  EXPECT_TRUE(closed(slow[2]));
  EXPECT_TRUE(closed(slow[3]));
  const HttpReply big = Get(port, "/", "X-Big: " + std::string(20000, 'a') + "\r\n");
  EXPECT_EQ(big.status, 431);
  EXPECT_EQ(Get(port, "/").status, 200);
}

TEST_F(MetricsHttp, SnapshotIsTheLatestStep) {
  const HttpReply r = Get(port_, "/api/v1/snapshot");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type").rfind("application/json", 0), 0u);
  EXPECT_EQ(r.header("cache-control"), "no-store");
  const auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["identity"], IdentityToJson(HttpOptions().identity));
  EXPECT_EQ(j["sample"], SampleToJson(Sample(5)));
  EXPECT_EQ(j, monitor_->SnapshotJson());
}

TEST_F(MetricsHttp, HistoryOldestFirstAndLast) {
  HttpReply r = Get(port_, "/api/v1/history");
  ASSERT_EQ(r.status, 200);
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["identity"]["job"], "http_job");
  ASSERT_EQ(j["steps"].size(), 5u);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(j["steps"][static_cast<size_t>(i)]["step"], i + 1);

  r = Get(port_, "/api/v1/history?last=2");
  ASSERT_EQ(r.status, 200);
  j = nlohmann::json::parse(r.body);
  ASSERT_EQ(j["steps"].size(), 2u);
  EXPECT_EQ(j["steps"][0]["step"], 4);
  EXPECT_EQ(j["steps"][1]["step"], 5);
  EXPECT_EQ(j["steps"][1], SampleToJson(Sample(5)));

  r = Get(port_, "/api/v1/history?last=100&other=x");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r.body)["steps"].size(), 5u);
  r = Get(port_, "/api/v1/history?last=0");
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(nlohmann::json::parse(r.body)["steps"].empty());

  for (const char *bad : {"last=abc", "last=-1", "last=", "last", "last=2x", "last=1e3",
                          "last=99999999999999999999", "last=1&last=2"}) {
    r = Get(port_, std::string("/api/v1/history?") + bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_NE(r.body.find("last"), std::string::npos) << bad << ": " << r.body;
    EXPECT_TRUE(nlohmann::json::accept(r.body)) << r.body;
  }
}

TEST_F(MetricsHttp, RanksListsThisRankAndConfigHidesTheToken) {
  HttpReply r = Get(port_, "/api/v1/ranks");
  ASSERT_EQ(r.status, 200);
  auto j = nlohmann::json::parse(r.body);
  ASSERT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["ranks"][0]["identity"]["rank"], 0);
  EXPECT_EQ(j["ranks"][0]["sample"]["step"], 5);
  EXPECT_TRUE(j["ranks"][0]["age_seconds"].is_number());

  r = Get(port_, "/api/v1/config");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body.find("plain-secret"), std::string::npos) << r.body;
  j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["train_batch_size"], 8);
  EXPECT_EQ(j["dstrain"]["monitor"]["http"]["token"], "<set>");
}

TEST(MetricsHttpRanks, RankTableCallbackAnswersOnRankZero) {
  SKIP_UNLESS_HTTP_CAN_RUN();
  MonitorOptions options = HttpOptions();
  options.rank_table = [] {
    return nlohmann::json::array(
        {nlohmann::json{{"identity", {{"rank", 0}}}}, nlohmann::json{{"identity", {{"rank", 1}}}}});
  };
  auto monitor = Start(options);
  ASSERT_TRUE(monitor);
  const HttpReply r = Get(monitor->http_port(), "/api/v1/ranks");
  ASSERT_EQ(r.status, 200);
  const auto j = nlohmann::json::parse(r.body);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["identity"]["rank"], 1);
}

TEST_F(MetricsHttp, OnlyGetAndHeadAreAllowed) {
  for (const char *method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    for (const char *path : {"/metrics", "/api/v1/snapshot", "/"}) {
      const HttpReply r = Request(port_, method, path, "Content-Length: 0\r\n");
      EXPECT_EQ(r.status, 405) << method << " " << path;
      EXPECT_EQ(r.header("allow"), "GET, HEAD") << method << " " << path;
    }
  }
  const HttpReply head = Request(port_, "HEAD", "/metrics");
  EXPECT_EQ(head.status, 200);
  EXPECT_GT(std::stoul(head.header("content-length")), 0u);
  EXPECT_EQ(head.body, "") << "HEAD has no body";
}

TEST_F(MetricsHttp, PathTraversalAndUnknownPathsAre404) {
  for (const char *path : {"/../etc/passwd",
                           "/assets/..%2f..%2fetc/passwd",
                           "/%2e%2e/",
                           "/%2e%2e/%2e%2e/etc/passwd",
                           "/assets/../../etc/passwd",
                           "/assets/../index.html",
                           "/assets/%2e%2e/index.html",
                           "/assets/./app.js",
                           "/./metrics",
                           "/metrics/..",
                           "/assets/..\\..\\etc\\passwd",
                           "/assets/%5c..%5cetc%5cpasswd",
                           "/etc/passwd",
                           "/assets/",
                           "/assets/nope.js",
                           "/api/v1/nope",
                           "/metrics/",
                           "/api/v1/snapshot/x",
                           "/index.htm",
                           "//metrics",
                           "/%252e%252e/etc/passwd"}) {
    const HttpReply r = Get(port_, path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.body.find("root:"), std::string::npos) << path;
    EXPECT_EQ(r.header("x-content-type-options"), "nosniff") << path;
  }
}

TEST_F(MetricsHttp, DashboardIsServedFromTheEmbeddedAssetsOnly) {
  const DashboardAsset *index = FindDashboardAsset("/");
  const HttpReply r = Get(port_, "/");
  if (index == nullptr) {
    EXPECT_EQ(r.status, 404);
    return;
  }
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), std::string(index->content_type));
  EXPECT_EQ(r.body, std::string(index->body));
  EXPECT_EQ(Get(port_, "/index.html").body, r.body);
}

TEST(MetricsHttpToken, EveryDataRequestNeedsTheBearerToken) {
  SKIP_UNLESS_HTTP_CAN_RUN();
  unsetenv("DSTRAIN_MONITOR_TOKEN");
  auto monitor = Start(HttpOptions(0, "s3cret-token"));
  ASSERT_TRUE(monitor);
  const int port = monitor->http_port();
  // The dashboard's static files are public (they hold no data; the page
  // sends the token with its API calls); everything else needs the token.
  EXPECT_EQ(Get(port, "/").status, 200);
  EXPECT_EQ(Get(port, "/index.html").status, 200);
  for (const char *path : {"/metrics", "/api/v1/snapshot", "/api/v1/config", "/api/v1/ranks",
                           "/nope", "/assets/nope.js"}) {
    const HttpReply missing = Get(port, path);
    EXPECT_EQ(missing.status, 401) << path;
    EXPECT_NE(missing.header("www-authenticate").find("Bearer"), std::string::npos);
    EXPECT_EQ(missing.body.find("dstrain_loss"), std::string::npos);
  }
  for (const char *header :
       {"Authorization: Bearer wrong\r\n", "Authorization: Bearer s3cret-toke\r\n",
        "Authorization: Bearer s3cret-token2\r\n", "Authorization: Basic czNjcmV0LXRva2Vu\r\n",
        "Authorization: s3cret-token\r\n", "Authorization: Bearer\r\n",
        "X-Token: s3cret-token\r\n"}) {
    EXPECT_EQ(Get(port, "/metrics", header).status, 401) << header;
  }
  EXPECT_EQ(Get(port, "/metrics", "Authorization: Bearer s3cret-token\r\n").status, 200);
  EXPECT_EQ(Get(port, "/api/v1/history?last=1", "Authorization: bearer s3cret-token\r\n").status,
            200);
  // Authenticated, the other rules still hold.
  EXPECT_EQ(Request(port, "POST", "/metrics", "Authorization: Bearer s3cret-token\r\n").status,
            405);
  EXPECT_EQ(Get(port, "/../etc/passwd", "Authorization: Bearer s3cret-token\r\n").status, 404);
}

// Guessing the token is rate-limited per client: after 20 wrong attempts
// within a minute the client gets 429 with Retry-After, even with the right
// token, until the minute has passed; the public page stays reachable.
TEST(MetricsHttpToken, FailedTokenAttemptsAreRateLimited) {
  SKIP_UNLESS_HTTP_CAN_RUN();
  unsetenv("DSTRAIN_MONITOR_TOKEN");
  auto monitor = Start(HttpOptions(0, "s3cret-token"));
  ASSERT_TRUE(monitor);
  const int port = monitor->http_port();
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(
        Get(port, "/metrics", "Authorization: Bearer guess" + std::to_string(i) + "\r\n").status,
        401);
  const HttpReply blocked = Get(port, "/metrics", "Authorization: Bearer s3cret-token\r\n");
  EXPECT_EQ(blocked.status, 429);
  EXPECT_FALSE(blocked.header("retry-after").empty());
  EXPECT_NE(blocked.body.find("too many requests with a wrong token from 127.0.0.1"),
            std::string::npos)
      << blocked.body;
  EXPECT_EQ(Get(port, "/").status, 200);
}

TEST(MetricsHttpToken, EnvironmentTokenOverridesTheConfig) {
  SKIP_UNLESS_HTTP_CAN_RUN();
  setenv("DSTRAIN_MONITOR_TOKEN", "from-env", 1);
  auto monitor = Start(HttpOptions(0, "from-config"));
  unsetenv("DSTRAIN_MONITOR_TOKEN");
  ASSERT_TRUE(monitor);
  const int port = monitor->http_port();
  EXPECT_EQ(Get(port, "/metrics", "Authorization: Bearer from-env\r\n").status, 200);
  EXPECT_EQ(Get(port, "/metrics", "Authorization: Bearer from-config\r\n").status, 401);
}

// The listening sockets on `port` from /proc/net/tcp{,6}: "ADDR" hex as the
// kernel prints it (0100007F is 127.0.0.1).
std::vector<std::string> ListeningAddresses(const char *table, int port) {
  std::vector<std::string> out;
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const size_t colon = local.find(':');
    if (state != "0A" || colon == std::string::npos) continue;  // 0A = LISTEN
    if (std::stoi(local.substr(colon + 1), nullptr, 16) == port)
      out.push_back(local.substr(0, colon));
  }
  return out;
}

TEST_F(MetricsHttp, BoundToLoopbackOnly) {
  const auto v4 = ListeningAddresses("/proc/net/tcp", port_);
  ASSERT_FALSE(v4.empty()) << "no listening socket on port " << port_;
  for (const auto &addr : v4) EXPECT_EQ(addr, "0100007F") << "listening beyond loopback";
  EXPECT_TRUE(ListeningAddresses("/proc/net/tcp6", port_).empty());
}

TEST(MetricsHttpPort, PortInUseIsAClearError) {
  SKIP_UNLESS_HTTP_CAN_RUN();
  Socket taken(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_GE(taken.fd(), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(taken.fd(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(taken.fd(), 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(taken.fd(), reinterpret_cast<sockaddr *>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  auto monitor = Monitor::Create(HttpOptions(port));
  ASSERT_FALSE(monitor.ok());
  const std::string &message = monitor.status().message();
  EXPECT_NE(message.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << message;
  EXPECT_NE(message.find("dstrain.monitor.http.port"), std::string::npos) << message;
  EXPECT_NE(message.find("in use"), std::string::npos) << message;
}

TEST(MetricsHttpPort, RankListensOnBasePortPlusLocalRank) {
  SKIP_UNLESS_HTTP_CAN_RUN();
  // Find a free port, then ask for it as base + local rank 2. Another process
  // may take it in between: retry a few times.
  bool checked = false;
  for (int attempt = 0; attempt < 5 && !checked; ++attempt) {
    int free_port = 0;
    {
      Socket probe(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(bind(probe.fd(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
      socklen_t len = sizeof(addr);
      ASSERT_EQ(getsockname(probe.fd(), reinterpret_cast<sockaddr *>(&addr), &len), 0);
      free_port = ntohs(addr.sin_port);
    }
    if (free_port < 1026) continue;
    MonitorOptions options = HttpOptions(free_port - 2);
    options.identity.local_rank = 2;
    options.identity.rank = 1;
    auto monitor = Monitor::Create(options);
    if (!monitor.ok()) continue;
    EXPECT_EQ(monitor.value()->http_port(), free_port);
    EXPECT_EQ(Get(free_port, "/metrics").status, 200);
    checked = true;
  }
  EXPECT_TRUE(checked) << "could not get a free port in 5 attempts";
}

TEST(MetricsHttpPort, BadHostAndPortAreErrors) {
  MonitorOptions options = HttpOptions();
  options.config.http.host = "127.0.0.1:80,0.0.0.0";  // would be a second listening address
  auto monitor = Monitor::Create(options);
  ASSERT_FALSE(monitor.ok());
  EXPECT_NE(monitor.status().message().find("dstrain.monitor.http.host"), std::string::npos)
      << monitor.status().message();

  options = HttpOptions(65535);
  options.identity.local_rank = 1;
  options.identity.rank = 1;
  monitor = Monitor::Create(options);
  ASSERT_FALSE(monitor.ok());
  EXPECT_NE(monitor.status().message().find("dstrain.monitor.http.port"), std::string::npos)
      << monitor.status().message();
}

TEST(MetricsHttpPort, StopsWhenTheMonitorIsDestroyed) {
  SKIP_UNLESS_HTTP_CAN_RUN();
  auto monitor = Start(HttpOptions());
  ASSERT_TRUE(monitor);
  const int port = monitor->http_port();
  EXPECT_EQ(Get(port, "/metrics").status, 200);
  monitor.reset();
  EXPECT_EQ(Get(port, "/metrics").status, 0) << "still answering after destruction";
  EXPECT_TRUE(ListeningAddresses("/proc/net/tcp", port).empty());
}

TEST(MetricsHttpPort, HttpOffMeansPortZero) {
  MonitorOptions options;
  auto monitor = Monitor::Create(options);
  ASSERT_TRUE(monitor.ok()) << monitor.status().message();
  EXPECT_EQ(monitor.value()->http_port(), 0);
}

TEST(MetricsHttpConcurrency, ReadersDuringSteps) {
  SKIP_UNLESS_HTTP_CAN_RUN();
  MonitorOptions options = HttpOptions();
  options.config.history_steps = 50;
  auto monitor = Start(options);
  ASSERT_TRUE(monitor);
  const int port = monitor->http_port();
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int64_t step = 1; step <= 300; ++step) EXPECT_TRUE(monitor->OnStep(Sample(step)).ok());
    done = true;
  });
  int answers = 0;
  while (!done.load() || answers < 3) {
    const HttpReply r = Get(port, "/api/v1/history");
    ASSERT_EQ(r.status, 200);
    const auto j = nlohmann::json::parse(r.body);
    EXPECT_LE(j["steps"].size(), 50u);
    for (size_t i = 1; i < j["steps"].size(); ++i) {
      EXPECT_EQ(j["steps"][i]["step"].get<int64_t>(), j["steps"][i - 1]["step"].get<int64_t>() + 1);
    }
    EXPECT_EQ(Get(port, "/metrics").status, 200);
    ++answers;
  }
  writer.join();
}

TEST(MetricsHttpRules, SafePathsAndTokenComparison) {
  EXPECT_TRUE(IsSafeRequestPath("/"));
  EXPECT_TRUE(IsSafeRequestPath("/assets/app.js"));
  EXPECT_TRUE(IsSafeRequestPath("/assets/a..b.js"));
  EXPECT_FALSE(IsSafeRequestPath(""));
  EXPECT_FALSE(IsSafeRequestPath("metrics"));
  EXPECT_FALSE(IsSafeRequestPath("/.."));
  EXPECT_FALSE(IsSafeRequestPath("/a/../b"));
  EXPECT_FALSE(IsSafeRequestPath("/a/./b"));
  EXPECT_FALSE(IsSafeRequestPath("/a/.."));
  EXPECT_FALSE(IsSafeRequestPath("/a\\b"));
  EXPECT_FALSE(IsSafeRequestPath(std::string_view("/a\nb")));

  EXPECT_TRUE(BearerTokenMatches("Bearer abc", "abc"));
  EXPECT_TRUE(BearerTokenMatches("BEARER abc", "abc"));
  EXPECT_FALSE(BearerTokenMatches("Bearer abd", "abc"));
  EXPECT_FALSE(BearerTokenMatches("Bearer ab", "abc"));
  EXPECT_FALSE(BearerTokenMatches("Bearer abcd", "abc"));
  EXPECT_FALSE(BearerTokenMatches("abc", "abc"));
  EXPECT_FALSE(BearerTokenMatches("Bearer ", ""));
}

}  // namespace
}  // namespace dst::metrics
