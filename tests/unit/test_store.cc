// The rendezvous TCP store: many ranks in threads of one process, each with
// its own connection, against a server on an ephemeral port (so parallel
// ctest runs do not collide), plus every failure the handshake and the
// transport must turn into a clear error instead of a hang.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/comm/heartbeat.h"
#include "core/comm/store.h"
#include "core/comm/tcp_store.h"
#include "core/comm/tcp_store_wire.h"

namespace dst {
namespace {

using std::chrono::milliseconds;
using testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTestTimeout(5000);

TcpStoreOptions Options(int port, int64_t rank, int64_t world_size,
                        const std::string &token = "token-1") {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.is_server = false;
  o.rank = rank;
  o.world_size = world_size;
  o.job_token = token;
  o.timeout = kTestTimeout;
  return o;
}

// Rank 0 hosting the server on a free port.
std::unique_ptr<TcpStore> StartServer(int64_t world_size, const std::string &token = "token-1") {
  TcpStoreOptions o = Options(0, 0, world_size, token);
  o.is_server = true;
  auto store = TcpStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status().message();
  return store.ok() ? std::move(store.value()) : nullptr;
}

std::vector<uint8_t> Bytes(const std::string &text) {
  return {text.begin(), text.end()};
}

std::string Text(const std::vector<uint8_t> &bytes) {
  return {bytes.begin(), bytes.end()};
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A port nothing listens on (bound, then released).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// What every rank does in the multi-rank test: publish, count, wait, read all.
Status RankRoutine(Store &store, int64_t rank, int64_t world_size) {
  DST_RETURN_IF_ERROR(
      store.Set("addr/" + std::to_string(rank), Bytes("host-" + std::to_string(rank))));
  auto count = store.Add("joined", 1);
  if (!count.ok()) return count.status();
  if (count.value() < 1 || count.value() > world_size) return InternalError("bad counter value");
  std::vector<std::string> keys;
  for (int64_t r = 0; r < world_size; ++r) keys.push_back("addr/" + std::to_string(r));
  DST_RETURN_IF_ERROR(store.Wait(keys, kTestTimeout));
  for (int64_t r = 0; r < world_size; ++r) {
    auto value = store.Get(keys[r], kTestTimeout);
    if (!value.ok()) return value.status();
    if (Text(value.value()) != "host-" + std::to_string(r)) {
      return InternalError("rank " + std::to_string(rank) + " read a wrong value for " + keys[r]);
    }
  }
  return Status::Ok();
}

TEST(TcpStore, ServerAndThreeClientsSetGetWaitAdd) {
  constexpr int64_t kWorld = 4;
  auto server = StartServer(kWorld);
  ASSERT_NE(server, nullptr);
  std::vector<std::future<Status>> ranks;
  for (int64_t r = 1; r < kWorld; ++r) {
    ranks.push_back(std::async(std::launch::async, [port = server->port(), r] {
      auto store = ConnectTcpStore(Options(port, r, kWorld));
      if (!store.ok()) return store.status();
      return RankRoutine(*store.value(), r, kWorld);
    }));
  }
  Status mine = RankRoutine(*server, 0, kWorld);
  EXPECT_TRUE(mine.ok()) << mine.message();
  for (auto &rank : ranks) {
    Status status = rank.get();
    EXPECT_TRUE(status.ok()) << status.message();
  }
  auto total = server->Get("joined", kTestTimeout);
  ASSERT_TRUE(total.ok()) << total.status().message();
  EXPECT_EQ(Text(total.value()), "4");  // counters read back as decimal text
}

TEST(TcpStore, GetBlocksUntilAnotherRankSets) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  auto waiter = std::async(std::launch::async, [port = server->port()] {
    auto store = ConnectTcpStore(Options(port, 1, 2));
    if (!store.ok()) return store.status().message();
    auto value = store.value()->Get("late", kTestTimeout);
    return value.ok() ? Text(value.value()) : value.status().message();
  });
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_TRUE(server->Set("late", Bytes("here")).ok());
  EXPECT_EQ(waiter.get(), "here");
}

TEST(TcpStore, AddCountsFromZeroAndRejectsNonCounters) {
  auto server = StartServer(1);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->Add("n", 5).value(), 5);
  EXPECT_EQ(server->Add("n", -7).value(), -2);
  ASSERT_TRUE(server->Set("text", Bytes("abc")).ok());
  auto bad = server->Add("text", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kComm);
  EXPECT_THAT(bad.status().message(), HasSubstr("not a counter"));
  // An error reply keeps the connection usable.
  EXPECT_EQ(server->Add("n", 2).value(), 0);
}

TEST(TcpStore, LargeAndEmptyValuesRoundTrip) {
  auto server = StartServer(1);
  ASSERT_NE(server, nullptr);
  std::vector<uint8_t> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31);
  ASSERT_TRUE(server->Set("big", big).ok());
  ASSERT_TRUE(server->Set("empty", {}).ok());
  EXPECT_EQ(server->Get("big", kTestTimeout).value(), big);
  EXPECT_TRUE(server->Get("empty", kTestTimeout).value().empty());
}

TEST(TcpStore, GetTimesOutNamingTheKeyAndTheCause) {
  auto server = StartServer(1);
  ASSERT_NE(server, nullptr);
  const auto start = Clock::now();
  auto value = server->Get("never/set", milliseconds(200));
  ASSERT_FALSE(value.ok());
  EXPECT_LT(SecondsSince(start), 3.0);
  EXPECT_GE(SecondsSince(start), 0.19);
  EXPECT_EQ(value.status().code(), Code::kComm);
  EXPECT_THAT(value.status().message(), HasSubstr("'never/set'"));
  EXPECT_THAT(value.status().message(), HasSubstr("200 ms"));
  EXPECT_THAT(value.status().message(), HasSubstr("crashed"));
  // The timeout was answered by the server: the connection still works.
  ASSERT_TRUE(server->Set("never/set", Bytes("now")).ok());
  EXPECT_EQ(Text(server->Get("never/set", milliseconds(200)).value()), "now");
}

TEST(TcpStore, WaitTimeoutNamesOnlyTheMissingKeys) {
  auto server = StartServer(1);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Set("a", Bytes("1")).ok());
  Status status = server->Wait({"a", "b"}, milliseconds(100));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), Code::kComm);
  EXPECT_THAT(status.message(), HasSubstr("key 'b'"));
  EXPECT_THAT(status.message(), testing::Not(HasSubstr("'a'")));
  EXPECT_TRUE(server->Wait({"a"}, milliseconds(0)).ok());
}

// One thread waits for a key in back-to-back slices while another (the
// heartbeat's role) sets keys on the same connection: the setter gets its
// turn between two slices, and the time it queued behind them does not count
// against its reply timeout (300 ms here, shorter than the wait): no set
// fails, and the connection stays usable.
TEST(TcpStore, AWaitingThreadDoesNotStarveAnotherThreadsCalls) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  TcpStoreOptions o = Options(server->port(), 1, 2);
  o.timeout = milliseconds(300);
  auto connected = ConnectTcpStore(o);
  ASSERT_TRUE(connected.ok()) << connected.status().message();
  Store *client = connected.value().get();
  std::atomic<bool> waiting{true};
  std::thread waiter([&] {
    EXPECT_FALSE(client->Wait({"never/set"}, milliseconds(2500)).ok());
    waiting = false;
  });
  int sets = 0;
  while (waiting) {
    Status st = client->Set("beat", Bytes(std::to_string(sets)));
    ASSERT_TRUE(st.ok()) << st.message();
    ++sets;
    std::this_thread::sleep_for(milliseconds(50));
  }
  waiter.join();
  EXPECT_GE(sets, 5);
  EXPECT_TRUE(client->Set("after", Bytes("ok")).ok());
}

TEST(TcpStore, WrongTokenIsRejected) {
  auto server = StartServer(2, "right-token");
  ASSERT_NE(server, nullptr);
  auto stray = ConnectTcpStore(Options(server->port(), 1, 2, "other-token"));
  ASSERT_FALSE(stray.ok());
  EXPECT_EQ(stray.status().code(), Code::kComm);
  EXPECT_THAT(stray.status().message(),
              HasSubstr("job token mismatch: this process was not started by this job's launcher "
                        "(DSTRAIN_JOB_TOKEN differs)"));
  // The rank slot is still free for the real rank 1.
  auto real = ConnectTcpStore(Options(server->port(), 1, 2, "right-token"));
  EXPECT_TRUE(real.ok()) << real.status().message();
}

TEST(TcpStore, WorldSizeMismatchNamesBothSizes) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  auto client = ConnectTcpStore(Options(server->port(), 1, 3));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), Code::kComm);
  EXPECT_THAT(client.status().message(), HasSubstr("world size mismatch"));
  EXPECT_THAT(client.status().message(), HasSubstr("WORLD_SIZE=3"));
  EXPECT_THAT(client.status().message(), HasSubstr("WORLD_SIZE=2"));
}

TEST(TcpStore, SameRankJoiningTwiceIsRejected) {
  auto server = StartServer(3);
  ASSERT_NE(server, nullptr);
  auto first = ConnectTcpStore(Options(server->port(), 1, 3));
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto second = ConnectTcpStore(Options(server->port(), 1, 3));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kComm);
  EXPECT_THAT(second.status().message(), HasSubstr("rank 1 has already joined"));
  EXPECT_THAT(second.status().message(), HasSubstr("RANK=1"));
  // The first connection is unaffected.
  EXPECT_TRUE(first.value()->Set("k", Bytes("v")).ok());
}

// A rank that sets a key and exits at once: its Set still lands, and its
// rank is free again for a restarted process.
TEST(TcpStore, ASetBeforeDisconnectLandsAndTheRankIsFreedAfterwards) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  {
    auto client = ConnectTcpStore(Options(server->port(), 1, 2));
    ASSERT_TRUE(client.ok()) << client.status().message();
    ASSERT_TRUE(client.value()->Set("last words", Bytes("bye")).ok());
  }
  EXPECT_EQ(Text(server->Get("last words", kTestTimeout).value()), "bye");
  // The server notices the close asynchronously: allow it a moment.
  Result<std::unique_ptr<Store>> again = Status(Code::kComm, "not tried");
  for (int attempt = 0; attempt < 100 && !again.ok(); ++attempt) {
    again = ConnectTcpStore(Options(server->port(), 1, 2));
    if (!again.ok()) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(again.ok()) << again.status().message();
}

TEST(TcpStore, PortInUseNamesThePortAndSuggestsAnother) {
  auto holder = StartServer(1);  // holds a port, as another job would
  ASSERT_NE(holder, nullptr);
  TcpStoreOptions o = Options(holder->port(), 0, 1);
  o.is_server = true;
  auto second = ConnectTcpStore(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kComm);
  EXPECT_THAT(second.status().message(), HasSubstr("already in use"));
  EXPECT_THAT(second.status().message(), HasSubstr("127.0.0.1:" + std::to_string(holder->port())));
  EXPECT_THAT(second.status().message(), HasSubstr("--master-port"));
}

TEST(TcpStore, PortInUseByAForeignIpv4ListenerIsDetected) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
  TcpStoreOptions o = Options(ntohs(addr.sin_port), 0, 1);
  o.is_server = true;
  auto store = ConnectTcpStore(o);
  close(fd);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("already in use"));
}

TEST(TcpStore, AbsentServerFailsAfterTheTimeoutNamingHostAndPort) {
  const int port = FreePort();
  TcpStoreOptions o = Options(port, 1, 2);
  o.timeout = milliseconds(300);
  const auto start = Clock::now();
  auto store = ConnectTcpStore(o);
  ASSERT_FALSE(store.ok());
  EXPECT_GE(SecondsSince(start), 0.29);
  EXPECT_LT(SecondsSince(start), 3.0);
  EXPECT_EQ(store.status().code(), Code::kComm);
  EXPECT_THAT(store.status().message(), HasSubstr("127.0.0.1:" + std::to_string(port)));
  EXPECT_THAT(store.status().message(), HasSubstr("rank 0"));
}

TEST(TcpStore, ClientRetriesUntilTheServerAppears) {
  const int port = FreePort();
  auto client = std::async(std::launch::async, [port] {
    auto store = ConnectTcpStore(Options(port, 1, 2));
    return store.ok() ? std::string("ok") : store.status().message();
  });
  std::this_thread::sleep_for(milliseconds(300));
  TcpStoreOptions o = Options(port, 0, 2);
  o.is_server = true;
  auto server = ConnectTcpStore(o);
  ASSERT_TRUE(server.ok()) << server.status().message();
  EXPECT_EQ(client.get(), "ok");
}

TEST(TcpStore, ServerDyingMidWaitFailsTheClientPromptly) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  auto client = ConnectTcpStore(Options(server->port(), 1, 2));
  ASSERT_TRUE(client.ok()) << client.status().message();
  Store &store = *client.value();
  auto pending = std::async(std::launch::async, [&store] {
    const auto start = Clock::now();
    auto value = store.Get("never", milliseconds(60000));
    return std::make_pair(value.status(), SecondsSince(start));
  });
  std::this_thread::sleep_for(milliseconds(200));
  const auto stop_start = Clock::now();
  server.reset();                            // rank 0 goes away
  EXPECT_LT(SecondsSince(stop_start), 2.0);  // the destructor does not hang
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto [status, seconds] = pending.get();
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(status.code(), Code::kComm);
  EXPECT_THAT(status.message(), HasSubstr("closed the connection"));
  EXPECT_THAT(status.message(), HasSubstr("'never'"));
  // Later calls fail at once with the same reason.
  Status again = store.Set("x", Bytes("y"));
  EXPECT_EQ(again.code(), Code::kComm);
  EXPECT_THAT(again.message(), HasSubstr("closed the connection"));
}

TEST(TcpStore, DestroyingAServerWithManyIdleClientsDoesNotHang) {
  auto server = StartServer(8);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Store>> clients;
  for (int64_t r = 1; r < 8; ++r) {
    auto c = ConnectTcpStore(Options(server->port(), r, 8));
    ASSERT_TRUE(c.ok()) << c.status().message();
    clients.push_back(std::move(c.value()));
  }
  const auto start = Clock::now();
  server.reset();
  EXPECT_LT(SecondsSince(start), 2.0);
  clients.clear();
}

// A peer that is not a dstrain rank: it gets an error reply and is
// disconnected; the server keeps serving the real ranks.
TEST(TcpStore, AbsurdFrameLengthIsRejectedAndTheServerSurvives) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(server->port()));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
  const uint8_t huge[8] = {'D', 'S', 'T', 'F', 0xff, 0xff, 0xff, 0xf0};
  ASSERT_EQ(send(fd, huge, sizeof(huge), MSG_NOSIGNAL), 8);
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::vector<uint8_t> received;
  uint8_t chunk[512];
  ssize_t n = 0;
  while ((n = recv(fd, chunk, sizeof(chunk), 0)) > 0)
    received.insert(received.end(), chunk, chunk + n);
  close(fd);
  EXPECT_EQ(n, 0) << "the server should close the connection";
  ASSERT_GE(received.size(), tcp_store::kFrameHeaderBytes + 1);
  auto reply = tcp_store::DecodeReply(
      std::span<const uint8_t>(received).subspan(tcp_store::kFrameHeaderBytes));
  ASSERT_TRUE(reply.ok()) << reply.status().message();
  EXPECT_EQ(reply->kind, tcp_store::ReplyKind::kError);
  EXPECT_THAT(reply->message, HasSubstr("over the store's limit"));

  auto client = ConnectTcpStore(Options(server->port(), 1, 2));
  ASSERT_TRUE(client.ok()) << client.status().message();
  EXPECT_TRUE(client.value()->Set("still", Bytes("serving")).ok());
}

// A listener that answers every connection with `reply` and keeps it open.
class FakeStore {
 public:
  explicit FakeStore(std::vector<uint8_t> reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr *>(&addr), sizeof(addr));
    socklen_t length = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr *>(&addr), &length);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 4);
    thread_ = std::thread([this] {
      const int peer = accept(fd_, nullptr, nullptr);
      if (peer < 0) return;
      send(peer, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      uint8_t sink[256];
      while (recv(peer, sink, sizeof(sink), 0) > 0) {
      }
      close(peer);
    });
  }
  ~FakeStore() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::vector<uint8_t> reply_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(TcpStore, AStoreAnsweringRandomBytesIsNamedMalformedAtOnce) {
  // Random bytes whose first four read as a small length: before frames
  // carried a magic, the client waited for the rest until its timeout and
  // blamed a stalled rank 0.
  std::vector<uint8_t> noise = {0x00, 0x00, 0x01, 0x00};
  uint32_t state = 12345;
  for (int i = 0; i < 60; ++i) {
    state = state * 1664525u + 1013904223u;
    noise.push_back(static_cast<uint8_t>(state >> 24));
  }
  for (const std::vector<uint8_t> &reply : {noise, std::vector<uint8_t>(64, 0)}) {
    FakeStore fake(reply);
    TcpStoreOptions o = Options(fake.port(), 1, 2);
    o.timeout = milliseconds(4000);
    const auto start = Clock::now();
    auto store = ConnectTcpStore(o);
    ASSERT_FALSE(store.ok());
    EXPECT_LT(SecondsSince(start), 2.0);
    EXPECT_EQ(store.status().code(), Code::kComm);
    EXPECT_THAT(store.status().message(), HasSubstr("malformed store message"));
    EXPECT_THAT(store.status().message(), HasSubstr("not a dstrain store"));
    EXPECT_THAT(store.status().message(), testing::Not(HasSubstr("stalled")));
  }
}

TEST(TcpStore, ConnectsByHostNameAndIpv6) {
  auto server = StartServer(3);
  ASSERT_NE(server, nullptr);
  TcpStoreOptions by_name = Options(server->port(), 1, 3);
  by_name.host = "localhost";
  auto named = ConnectTcpStore(by_name);
  EXPECT_TRUE(named.ok()) << named.status().message();

  const int probe = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 loop6{};
  loop6.sin6_family = AF_INET6;
  loop6.sin6_addr = in6addr_loopback;
  const bool has_ipv6 =
      probe >= 0 && bind(probe, reinterpret_cast<sockaddr *>(&loop6), sizeof(loop6)) == 0;
  if (probe >= 0) close(probe);
  if (!has_ipv6) GTEST_SKIP() << "no IPv6 loopback on this host";
  TcpStoreOptions v6 = Options(server->port(), 2, 3);
  v6.host = "::1";
  auto over_v6 = ConnectTcpStore(v6);
  ASSERT_TRUE(over_v6.ok()) << over_v6.status().message();
  EXPECT_TRUE(over_v6.value()->Set("v6", Bytes("yes")).ok());
}

// Without DNS the lookup may fail as "temporary" and be retried until the
// timeout; either way the error names the host and nothing hangs.
TEST(TcpStore, UnresolvableHostIsNamed) {
  TcpStoreOptions o = Options(29500, 1, 2);
  o.host = "no-such-host.invalid";
  o.timeout = milliseconds(1500);
  const auto start = Clock::now();
  auto store = ConnectTcpStore(o);
  ASSERT_FALSE(store.ok());
  EXPECT_LT(SecondsSince(start), 15.0);
  EXPECT_EQ(store.status().code(), Code::kComm);
  EXPECT_THAT(store.status().message(), HasSubstr("no-such-host.invalid"));
}

TEST(TcpStore, InvalidOptionsAreRejected) {
  auto bad_rank = ConnectTcpStore(Options(29500, 2, 2));
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_EQ(bad_rank.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(bad_rank.status().message(), HasSubstr("rank 2 is out of range"));
  auto bad_port = ConnectTcpStore(Options(0, 1, 2));  // port 0 only for the server
  EXPECT_EQ(bad_port.status().code(), Code::kInvalidArgument);
  TcpStoreOptions no_time = Options(29500, 0, 1);
  no_time.timeout = milliseconds(0);
  EXPECT_EQ(ConnectTcpStore(no_time).status().code(), Code::kInvalidArgument);
}

TEST(TcpStoreWire, RequestsAndRepliesRoundTrip) {
  tcp_store::Request wait;
  wait.op = tcp_store::Op::kWait;
  wait.keys = {"a", "", "long/key"};
  wait.number = 1234;
  auto decoded = tcp_store::DecodeRequest(tcp_store::EncodeRequest(wait));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->keys, wait.keys);
  EXPECT_EQ(decoded->number, 1234);

  tcp_store::Reply value;
  value.kind = tcp_store::ReplyKind::kValue;
  value.value = {0, 1, 255};
  auto back = tcp_store::DecodeReply(tcp_store::EncodeReply(value));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->value, value.value);
}

TEST(TcpStoreWire, TruncatedAndTrailingBytesAreErrors) {
  tcp_store::Request set;
  set.op = tcp_store::Op::kSet;
  set.keys = {"key"};
  set.value = {1, 2, 3};
  std::vector<uint8_t> payload = tcp_store::EncodeRequest(set);
  auto truncated =
      tcp_store::DecodeRequest(std::span<const uint8_t>(payload).first(payload.size() - 1));
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), Code::kComm);
  EXPECT_THAT(truncated.status().message(), HasSubstr("truncated"));
  payload.push_back(0);
  EXPECT_THAT(tcp_store::DecodeRequest(payload).status().message(), HasSubstr("trailing"));
  const std::vector<uint8_t> unknown = {99};
  EXPECT_THAT(tcp_store::DecodeRequest(unknown).status().message(), HasSubstr("unknown"));
}

// Runs CheckSameConfig on `texts.size()` ranks (one thread each) and returns
// every rank's status.
std::vector<Status> CheckConfigsOnRanks(const std::vector<std::string> &texts) {
  const auto world = static_cast<int64_t>(texts.size());
  auto server = StartServer(world);
  if (server == nullptr) return {InternalError("no server")};
  std::vector<std::future<Status>> others;
  for (int64_t r = 1; r < world; ++r) {
    others.push_back(std::async(std::launch::async, [&texts, port = server->port(), r, world] {
      auto store = ConnectTcpStore(Options(port, r, world));
      if (!store.ok()) return store.status();
      return CheckSameConfig(*store.value(), r, world, texts[r], kTestTimeout);
    }));
  }
  std::vector<Status> statuses = {CheckSameConfig(*server, 0, world, texts[0], kTestTimeout)};
  for (auto &other : others) statuses.push_back(other.get());
  return statuses;
}

TEST(CheckSameConfig, IdenticalConfigsPass) {
  const std::string config = R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}})";
  for (const Status &status : CheckConfigsOnRanks({config, config, config})) {
    EXPECT_TRUE(status.ok()) << status.message();
  }
}

TEST(CheckSameConfig, AMismatchNamesTheRanksAndTheDifference) {
  const std::string config = "{\n  \"train_batch_size\": 8,\n  \"stage\": 2\n}";
  const std::string other = "{\n  \"train_batch_size\": 8,\n  \"stage\": 3\n}";
  std::vector<Status> statuses = CheckConfigsOnRanks({config, config, other, other});
  ASSERT_EQ(statuses.size(), 4u);
  EXPECT_EQ(statuses[0].code(), Code::kConfig);
  EXPECT_THAT(statuses[0].message(), HasSubstr("ranks 2, 3 were started with a different config"));
  EXPECT_THAT(statuses[0].message(), HasSubstr("same ds_config"));
  EXPECT_THAT(statuses[0].message(), HasSubstr("rank 2 has '"));  // where rank 2 differs
  EXPECT_THAT(statuses[0].message(), HasSubstr("\"stage\": 3"));
  EXPECT_TRUE(statuses[1].ok()) << statuses[1].message();
  for (int r : {2, 3}) {
    EXPECT_EQ(statuses[r].code(), Code::kConfig);
    EXPECT_THAT(statuses[r].message(), HasSubstr("rank " + std::to_string(r) + " was started"));
    EXPECT_THAT(statuses[r].message(), HasSubstr("\"stage\": 2"));
    EXPECT_THAT(statuses[r].message(), HasSubstr("\"stage\": 3"));
    EXPECT_THAT(statuses[r].message(), HasSubstr("same ds_config"));
  }
}

// A second check in the same job compares the new configs, not the first
// check's hashes.
TEST(CheckSameConfig, RepeatedChecksDoNotSeeEarlierRounds) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  auto client = ConnectTcpStore(Options(server->port(), 1, 2));
  ASSERT_TRUE(client.ok()) << client.status().message();
  Store &rank1 = *client.value();
  for (const auto &[text0, text1, same] : std::vector<std::tuple<std::string, std::string, bool>>{
           {"a", "a", true}, {"b", "c", false}, {"d", "d", true}}) {
    auto other = std::async(std::launch::async, [&rank1, text1 = text1] {
      return CheckSameConfig(rank1, 1, 2, text1, kTestTimeout);
    });
    Status mine = CheckSameConfig(*server, 0, 2, text0, kTestTimeout);
    Status theirs = other.get();
    EXPECT_EQ(mine.ok(), same) << text0 << " " << mine.message();
    EXPECT_EQ(theirs.ok(), same) << text1 << " " << theirs.message();
  }
}

TEST(CheckSameConfig, AMissingRankTimesOut) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  Status status = CheckSameConfig(*server, 0, 2, "{}", milliseconds(200));
  EXPECT_EQ(status.code(), Code::kComm);
  EXPECT_THAT(status.message(), HasSubstr("dstrain/config_check/1/hash/1"));
}

// Rank 0's stall watch over rank 1, whose heartbeat stopped at "5 3" (5
// beats, step 3) and whose store connection stays open or closes (Abort:
// gone without finishing, so the server counts it lost): the watch's first
// non-empty verdict, "" after 5 s, or what kept the setup from running.
std::string VerdictOnSilentPeer(bool connection_closes) {
  auto server = StartServer(2);
  if (server == nullptr) return "setup: no server";
  auto peer = ConnectTcpStore(Options(server->port(), 1, 2));
  if (!peer.ok()) return "setup: " + peer.status().message();
  const Status beat = peer.value()->Set(std::string(kBeatKey) + "1", Bytes("5 3"));
  if (!beat.ok()) return "setup: " + beat.message();
  if (connection_closes) peer.value()->Abort();
  StallWatch watch(server.get(), {1}, milliseconds(100));
  const auto start = Clock::now();
  while (SecondsSince(start) < 5.0) {
    std::string verdict = watch.Check();
    if (!verdict.empty()) return verdict;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return "";
}

// A peer that stopped beating but keeps its store connection (SIGSTOP, a
// debugger) has stalled; one whose connection closed (killed, crashed) died,
// and the watch says so rather than calling it stopped.
TEST(StallWatch, ASilentPeerWithItsConnectionOpenHasStalled) {
  const std::string verdict = VerdictOnSilentPeer(false);
  EXPECT_THAT(verdict, HasSubstr("rank 1 has stalled"));
  EXPECT_THAT(verdict, HasSubstr("reported step 3"));
}

TEST(StallWatch, ASilentPeerWhoseConnectionClosedDiedFirst) {
  const std::string verdict = VerdictOnSilentPeer(true);
  EXPECT_THAT(verdict, HasSubstr("rank 1 died first"));
  EXPECT_THAT(verdict, testing::Not(HasSubstr("stalled")));
}

// dst_engine_abort's signal ends a blocking Get or Wait within one slice
// (250 ms), with kAborted naming the key, long before the timeout.
TEST(TcpStore, AnAbortEndsABlockingGetOrWaitWithinASlice) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  auto signal = std::make_shared<AbortSignal>();
  TcpStoreOptions o = Options(server->port(), 1, 2);
  o.timeout = milliseconds(60000);
  o.abort = signal;
  auto client = ConnectTcpStore(o);
  ASSERT_TRUE(client.ok()) << client.status().message();
  for (bool wait : {false, true}) {
    std::thread raiser([&] {
      std::this_thread::sleep_for(milliseconds(300));
      signal->Raise();
    });
    const auto start = Clock::now();
    const Status st = wait ? client.value()->Wait({"never"}, milliseconds(60000))
                           : client.value()->Get("never", milliseconds(60000)).status();
    const double seconds = SecondsSince(start);
    raiser.join();
    EXPECT_EQ(st.code(), Code::kAborted) << st.message();
    EXPECT_THAT(st.message(), HasSubstr("'never'"));
    EXPECT_THAT(st.message(), HasSubstr("dst_engine_abort"));
    EXPECT_LT(seconds, 0.3 + 0.6) << st.message();
  }
  // Single round trips still work after the abort (the heartbeat's last beat).
  EXPECT_TRUE(client.value()->Set("after", Bytes("1")).ok());
}

// A heartbeat whose abort signal is raised says so within a slice, and a
// peer's stall watch then names the abort (not a stall).
TEST(StallWatch, AnAbortedPeerIsNamedAsAborted) {
  auto server = StartServer(2);
  ASSERT_NE(server, nullptr);
  auto peer = ConnectTcpStore(Options(server->port(), 1, 2));
  ASSERT_TRUE(peer.ok()) << peer.status().message();
  auto signal = std::make_shared<AbortSignal>();
  Heartbeat heartbeat(peer.value().get(), 1, signal);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(DescribeAbortedRank(*server, 1), "");
  signal->Raise();
  const auto start = Clock::now();
  StallWatch watch(server.get(), {1}, milliseconds(60000));
  std::string verdict;
  while (verdict.empty() && SecondsSince(start) < 3.0) {
    verdict = watch.Aborted();
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_LT(SecondsSince(start), 0.5) << verdict;
  EXPECT_THAT(verdict, HasSubstr("rank 1 aborted"));
  std::this_thread::sleep_for(kBeatInterval);
  EXPECT_THAT(watch.Check(), HasSubstr("rank 1 aborted"));
}

}  // namespace
}  // namespace dst
