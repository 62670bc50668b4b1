#include "metrics/http_server.h"

#include "metrics/dashboard_assets.h"
#include "metrics/http_front.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <link.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace dst::metrics {

namespace {

void InitCivetWebOnce() {
  static std::once_flag once;
  // Features 0: plain HTTP (no TLS, no websockets). Never de-initialised: the
  // library state lives as long as the process.
  std::call_once(once, [] { mg_init_library(0); });
}

// Debian's libcivetweb is built with USE_STACK_SIZE=102400: every CivetWeb
// thread gets a 100 KiB stack, and glibc carves the process's static
// thread-local storage (every library loaded at start-up: libopenblas alone
// has 60 KiB, libnccl 12 KiB, libcudart 4 KiB) out of that stack. CivetWeb's
// own request path needs about 30 KiB; with less it overflows into the
// neighbouring thread and the process dies at the first request. So Start
// measures what such a thread really gets and refuses below kMinHeadroom.
constexpr size_t kCivetWebStackSize = 102400;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DSTRAIN_SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DSTRAIN_SANITIZED_BUILD 1
#endif
#endif
#ifdef DSTRAIN_SANITIZED_BUILD
// A sanitizer's interceptors and its larger frames overflow 100 KiB on
// CivetWeb's request path (seen: glibc's printf_positional under
// AddressSanitizer); such a build refuses the server by name instead.
constexpr size_t kMinHeadroom = 1024 * 1024;
constexpr bool kSanitized = true;
#else
constexpr size_t kMinHeadroom = 32 * 1024;
constexpr bool kSanitized = false;
#endif

void *MeasureHeadroom(void *out) {
  pthread_attr_t attr;
  size_t headroom = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void *low = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &low, &size) == 0) {
      // The frame address, not a local's: under AddressSanitizer's
      // use-after-return detection locals live in a fake stack on the heap.
      const char *here = static_cast<const char *>(__builtin_frame_address(0));
      headroom = static_cast<size_t>(here - static_cast<char *>(low));
    }
    pthread_attr_destroy(&attr);
  }
  *static_cast<size_t *>(out) = headroom;
  return nullptr;
}

// Stack bytes left to a thread created with CivetWeb's stack size (0 when
// such a thread cannot even be created).
size_t CivetWebThreadHeadroom() {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return 0;
  size_t headroom = 0;
  pthread_t thread;
  const bool created = pthread_attr_setstacksize(&attr, kCivetWebStackSize) == 0 &&
                       pthread_create(&thread, &attr, &MeasureHeadroom, &headroom) == 0;
  pthread_attr_destroy(&attr);
  if (!created) return 0;
  pthread_join(thread, nullptr);
  return headroom;
}

// "libopenblas.so.0 60 KiB, libnccl.so.2 12 KiB": the loaded libraries with
// at least 4 KiB of thread-local storage.
std::string LargeTlsLibraries() {
  std::string out;
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) {
        auto *text = static_cast<std::string *>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) &ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_TLS || ph.p_memsz < 4096) continue;
          std::string name = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "the program";
          name = name.substr(name.rfind('/') + 1);
          *text +=
              (text->empty() ? "" : ", ") + name + " " + std::to_string(ph.p_memsz / 1024) + " KiB";
        }
        return 0;
      },
      &out);
  return out.empty() ? "none found" : out;
}

bool IEqualsAscii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) {
      return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// The listening host as CivetWeb wants it ("1.2.3.4" or "[::1]"), or empty
// when `host` is not an IP literal or "localhost".
std::string ListenHost(std::string host) {
  if (host == "localhost") return "127.0.0.1";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::array<unsigned char, 16> addr{};
  if (inet_pton(AF_INET, host.c_str(), addr.data()) == 1) return host;
  if (inet_pton(AF_INET6, host.c_str(), addr.data()) == 1) return "[" + host + "]";
  return {};
}

std::string ErrorBody(int status, std::string_view message) {
  return nlohmann::json{{"error", message}, {"status", status}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse ErrorResponse(int status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.body = ErrorBody(status, message);
  return r;
}

// Writes the whole answer. `extra` are additional header name/value pairs.
void Send(mg_connection *conn, bool head_only, const HttpResponse &r,
          const std::vector<std::pair<const char *, std::string>> &extra = {}) {
  const std::string length = std::to_string(r.body.size());
  mg_response_header_start(conn, r.status);
  mg_response_header_add(conn, "Content-Type", r.content_type.c_str(), -1);
  mg_response_header_add(conn, "Content-Length", length.c_str(), -1);
  mg_response_header_add(conn, "X-Content-Type-Options", "nosniff", -1);
  mg_response_header_add(conn, "Cache-Control", r.cache_control.c_str(), -1);
  for (const auto &[name, value] : extra) mg_response_header_add(conn, name, value.c_str(), -1);
  mg_response_header_send(conn);
  if (!head_only && !r.body.empty()) mg_write(conn, r.body.data(), r.body.size());
}

}  // namespace

std::string NewPeerSecret() {
  std::random_device device;
  std::string secret;
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 8; ++i) {
    const unsigned word = device();
    for (int shift = 0; shift < 32; shift += 4) secret += kHex[(word >> shift) & 15];
  }
  return secret;
}

bool IsSafeRequestPath(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\\') return false;
  }
  size_t begin = 1;
  while (begin <= path.size()) {
    size_t end = path.find('/', begin);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view segment = path.substr(begin, end - begin);
    if (segment == "." || segment == "..") return false;
    begin = end + 1;
  }
  return true;
}

bool BearerTokenMatches(std::string_view authorization, std::string_view token) {
  constexpr std::string_view kScheme = "Bearer ";
  if (token.empty() || authorization.size() < kScheme.size() ||
      !IEqualsAscii(authorization.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  std::string_view given = authorization.substr(kScheme.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  while (!given.empty() && given.back() == ' ') given.remove_suffix(1);
  // Constant time in the content: every byte of the longer string is visited.
  const size_t n = std::max(given.size(), token.size());
  unsigned diff = given.size() == token.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const auto a = static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    const auto b = static_cast<unsigned char>(i < token.size() ? token[i] : 0);
    diff |= static_cast<unsigned>(a ^ b);
  }
  return diff == 0;
}

Status CheckHttpServerCanRun() {
  const size_t headroom = CivetWebThreadHeadroom();
  if (headroom >= kMinHeadroom) return Status::Ok();
  if (kSanitized)
    return StateError(
        "the metrics HTTP server cannot run in a sanitizer build: CivetWeb's worker threads have "
        "a fixed 100 KiB stack (Debian's libcivetweb build), which the sanitizer's frames "
        "overflow; set dstrain.monitor.http.enabled to false (the registry and "
        "dstrain.monitor.log still work)");
  return StateError(
      "the metrics HTTP server cannot run in this process: CivetWeb's worker threads have a "
      "fixed 100 KiB stack (Debian's libcivetweb build), and this process's thread-local "
      "storage leaves them " +
      std::to_string(headroom / 1024) + " KiB where about " + std::to_string(kMinHeadroom / 1024) +
      " KiB are needed (libraries with large thread-local storage: " + LargeTlsLibraries() +
      "). Do not load the CUDA/NCCL libraries on a host that does not use them (configure "
      "with -DDSTRAIN_WITH_CUDA=OFF), or set dstrain.monitor.http.enabled to false (the "
      "registry and dstrain.monitor.log still work)");
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions &options,
                                                      HttpHandler handler) {
  const std::string host = ListenHost(options.host);
  if (host.empty()) {
    return InvalidArgument(
        "dstrain.monitor.http.host: expected an IP address (127.0.0.1, ::1, "
        "0.0.0.0) or \"localhost\", found \"" +
        options.host + "\"");
  }
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgument("the metrics HTTP port " + std::to_string(options.port) +
                           " is outside 0-65535; set " + options.port_setting +
                           " so that port + local rank stays below 65536 (0 = any free port)");
  }
  const std::string address = host + ":" + std::to_string(options.port);
  InitCivetWebOnce();
  DST_RETURN_IF_ERROR(CheckHttpServerCanRun());

  std::unique_ptr<HttpServer> server(
      new HttpServer(std::move(handler), options.token, NewPeerSecret()));
  const std::string threads = std::to_string(std::max(1, options.num_threads));
  const std::string timeout = std::to_string(std::max(1, options.request_timeout_ms));
  // CivetWeb listens on loopback only and gets whole requests from the front
  // (http_front.h), which owns the public address. No document_root: nothing
  // is served from the file system.
  const char *civet_options[] = {"listening_ports",
                                 "127.0.0.1:0",
                                 "num_threads",
                                 threads.c_str(),
                                 "request_timeout_ms",
                                 timeout.c_str(),
                                 "enable_keep_alive",
                                 "no",
                                 "enable_directory_listing",
                                 "no",
                                 nullptr};
  mg_callbacks callbacks{};
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = civet_options;
  unsigned error_code = 0;
  char error_text[256] = "";
  mg_error_data error{};
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  server->ctx_ = mg_start2(&init, &error);
  if (server->ctx_ == nullptr) {
    return IoError("the metrics HTTP server cannot start CivetWeb on 127.0.0.1: " +
                   std::string(error_text[0] ? error_text : "unknown CivetWeb error"));
  }
  // Every path goes to one handler ("/" is a prefix of every URI).
  mg_set_request_handler(server->ctx_, "/", &HttpServer::HandleRequest, server.get());
  mg_server_port ports[4] = {};
  const int n = mg_get_server_ports(server->ctx_, 4, ports);
  if (n < 1 || ports[0].port <= 0) {
    return InternalError("the metrics HTTP server started CivetWeb but it reports no port");
  }
  server->backend_port_ = ports[0].port;

  HttpFrontOptions front;
  front.host = host;
  front.port = options.port;
  front.backend_port = server->backend_port_;
  front.peer_secret = server->peer_secret_;
  front.header_timeout = std::chrono::milliseconds(std::max(1, options.header_timeout_ms));
  front.max_pending = std::max(1, options.max_pending);
  front.max_pending_per_client = std::max(1, options.max_pending_per_client);
  int bind_error = 0;
  Result<std::unique_ptr<HttpFront>> started = HttpFront::Start(front, &bind_error);
  if (!started.ok()) {
    std::string message = started.status().message();
    if (bind_error == EADDRINUSE) {
      message += "; the port is taken (another job, rank or program on this host): set " +
                 options.port_setting +
                 " to a free base port (rank r listens on port + local rank) or to 0 for any "
                 "free port";
    } else {
      message += "; check dstrain.monitor.http.host and " + options.port_setting;
    }
    return IoError(message);
  }
  server->front_ = std::move(started).value();
  server->port_ = server->front_->port();
  server->address_ = host + ":" + std::to_string(server->port_);
  return server;
}

namespace {

// One throwaway connection to CivetWeb's loopback port.
void WakeListener(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr);
  ::close(fd);
}

}  // namespace

// CivetWeb's accept loop sees mg_stop's flag only when its poll() wakes,
// every 2 s; connecting to our own port wakes it at once, so an engine with
// HTTP on does not take 2 s to close.
HttpServer::~HttpServer() {
  front_.reset();  // no new requests
  if (ctx_ == nullptr) return;
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    mg_stop(ctx_);
    stopped = true;
  });
  while (!stopped) {
    if (backend_port_ > 0) WakeListener(backend_port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stopper.join();
}

int HttpServer::HandleRequest(mg_connection *conn, void *self) {
  try {
    static_cast<HttpServer *>(self)->Handle(conn);
  } catch (...) {
    // Nothing may unwind into CivetWeb's C code; the connection is closed.
  }
  return 1;
}

// What CivetWeb's request holds that the answer depends on, copied so the
// answer can be computed on another thread.
struct HttpServer::Incoming {
  std::string client;  // remote address
  std::string method;
  std::optional<std::string> path;  // percent-decoded, dot segments kept
  std::string query;
  std::optional<std::string> authorization;
};

struct HttpServer::Answer {
  HttpResponse response;
  std::vector<std::pair<const char *, std::string>> headers;  // extra headers
};

HttpServer::Answer HttpServer::Decide(const Incoming &in) const {
  const bool head = in.method == "HEAD";
  // The dashboard's own files hold no data and a browser cannot attach a
  // header when it opens a page: they are public; the page then sends the
  // token (from its URL fragment) with every API call.
  const bool public_asset = (in.method == "GET" || head) && in.path &&
                            IsSafeRequestPath(*in.path) && FindDashboardAsset(*in.path) != nullptr;
  if (!token_.empty() && !public_asset) {
    if (const int64_t wait = BlockedFor(in.client); wait > 0)
      return {ErrorResponse(429, "too many requests with a wrong token from " + in.client +
                                     "; try again in " + std::to_string(wait) + " s"),
              {{"Retry-After", std::to_string(wait)}}};
  }
  if (!token_.empty() && !public_asset &&
      !(in.authorization && BearerTokenMatches(*in.authorization, token_))) {
    NoteFailedToken(in.client);
    return {ErrorResponse(401,
                          "missing or wrong bearer token: send the header \"Authorization: Bearer "
                          "<token>\" (dstrain.monitor.http.token or DSTRAIN_MONITOR_TOKEN)"),
            {{"WWW-Authenticate", "Bearer realm=\"dstrain\""}}};
  }
  if (in.method != "GET" && !head) {
    return {ErrorResponse(405, "only GET and HEAD are allowed"), {{"Allow", "GET, HEAD"}}};
  }
  if (!in.path || !IsSafeRequestPath(*in.path)) return {ErrorResponse(404, "not found"), {}};
  try {
    return {handler_(HttpRequest{in.method, *in.path, in.query}), {}};
  } catch (const std::exception &e) {
    return {ErrorResponse(500, std::string("internal error: ") + e.what()), {}};
  } catch (...) {
    return {ErrorResponse(500, "internal error"), {}};
  }
}

int64_t HttpServer::BlockedFor(const std::string &client) const {
  std::lock_guard<std::mutex> lock(failures_mu_);
  auto it = failures_.find(client);
  if (it == failures_.end()) return 0;
  const auto elapsed = std::chrono::steady_clock::now() - it->second.since;
  if (elapsed >= kFailureWindow) {
    failures_.erase(it);
    return 0;
  }
  if (it->second.count < kMaxFailedTokens) return 0;
  return std::chrono::duration_cast<std::chrono::seconds>(kFailureWindow - elapsed).count() + 1;
}

void HttpServer::NoteFailedToken(const std::string &client) const {
  std::lock_guard<std::mutex> lock(failures_mu_);
  if (failures_.size() > 4096) failures_.clear();  // bounded: a flood forgets, it does not grow
  Failures &f = failures_[client];
  if (f.count == 0) f.since = std::chrono::steady_clock::now();
  ++f.count;
}

void HttpServer::Handle(mg_connection *conn) {
  // This runs on a CivetWeb thread, whose stack is small (see
  // kCivetWebStackSize): only the copying and the socket I/O happen here; the
  // answer is computed on a thread of ours with a default-size stack.
  const mg_request_info *info = mg_get_request_info(conn);
  Incoming in;
  in.client = info->remote_addr;
  // Behind the front every request comes from loopback; the front names the
  // real client, with a secret only it and this server know.
  if (const char *peer = mg_get_header(conn, kPeerHeader)) {
    const std::string_view value(peer);
    if (value.size() > peer_secret_.size() + 1 && value.starts_with(peer_secret_) &&
        value[peer_secret_.size()] == ' ')
      in.client = std::string(value.substr(peer_secret_.size() + 1));
  }
  in.method = info->request_method ? info->request_method : "";
  if (info->local_uri_raw) in.path = info->local_uri_raw;
  if (info->query_string) in.query = info->query_string;
  if (const char *authorization = mg_get_header(conn, "Authorization")) {
    in.authorization = authorization;
  }
  Answer answer;
  try {
    std::thread decide([&] { answer = Decide(in); });
    decide.join();
  } catch (const std::system_error &) {  // no thread could be started
    answer.response.status = 503;
    answer.response.body = R"({"error": "cannot start a thread for the request", "status": 503})";
  }
  Send(conn, in.method == "HEAD", answer.response, answer.headers);
}

}  // namespace dst::metrics
