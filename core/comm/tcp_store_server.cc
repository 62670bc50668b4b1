#include "core/comm/tcp_store_server.h"

#include "core/comm/store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/comm/tcp_store_wire.h"

namespace dst::tcp_store {
using ::dst::kDoneKey;
using ::dst::kFinishedKey;
using ::dst::kLostKey;
namespace {

constexpr size_t kReadChunk = 64 * 1024;

// One client connection and its buffered, not yet parsed input and not yet
// sent output.
struct Connection {
  UniqueFd fd;
  std::string peer;  // "10.0.0.2:51234", for messages
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;
  bool greeted = false;  // the handshake succeeded
  int64_t rank = -1;
  bool closing = false;  // an error reply is queued: close once it is sent
  bool dead = false;     // closed by the peer or by us: swept after this round
};

// A parked Get (one key, replies with its value) or Wait (replies kOk).
struct Waiter {
  int fd = -1;
  Op op = Op::kWait;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

std::string TokenMismatchMessage() {
  return "job token mismatch: this process was not started by this job's launcher "
         "(DSTRAIN_JOB_TOKEN differs)";
}

// Constant-time comparison: the token is the only thing keeping strangers
// out, so do not leak how much of it a guess got right.
bool SameToken(const std::string &a, const std::string &b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff |= static_cast<unsigned>(a[i] ^ b[i]);
  }
  return diff == 0;
}

Reply ErrorReply(const std::string &message) {
  Reply reply;
  reply.kind = ReplyKind::kError;
  reply.message = message;
  return reply;
}

std::vector<uint8_t> DecimalBytes(int64_t value) {
  const std::string text = std::to_string(value);
  return {text.begin(), text.end()};
}

}  // namespace

class StoreServer::Loop {
 public:
  Loop(UniqueFd listener, UniqueFd wake_read, ServerIdentity identity)
      : listener_(std::move(listener)),
        wake_read_(std::move(wake_read)),
        identity_(std::move(identity)) {}

  // Serves until the wake pipe is written. Never throws: on an internal
  // failure (out of memory) it drops every connection so that clients get
  // an error instead of waiting for a server that stopped answering.
  void Run() noexcept {
    try {
      while (PollOnce()) {
      }
    } catch (...) {
    }
    conns_.clear();
    listener_.reset();
  }

 private:
  bool PollOnce();
  void Accept();
  void ReadFrom(Connection &c);
  void ParseFrames(Connection &c);
  void Handle(Connection &c, std::span<const uint8_t> payload);
  void HandleHello(Connection &c, const Request &r);
  void HandleSet(Connection &c, const Request &r);
  void HandleAdd(Connection &c, const Request &r);
  void HandleWait(Connection &c, const Request &r);
  bool Present(const std::vector<std::string> &keys) const;
  void Answer(Waiter &w);
  void WakeWaiters();
  void ExpireWaiters();
  void Send(Connection &c, const Reply &reply);
  void Fail(Connection &c, const std::string &message);
  void Flush(Connection &c);
  void Sweep();
  void RecordDeparture(int64_t rank);
  int NextTimeoutMs() const;

  UniqueFd listener_;
  UniqueFd wake_read_;
  ServerIdentity identity_;
  std::map<int, Connection> conns_;    // by fd
  std::map<int64_t, int> rank_to_fd_;  // ranks that completed the handshake
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  std::vector<Waiter> waiters_;
};

bool StoreServer::Loop::PollOnce() {
  std::vector<pollfd> fds;
  fds.push_back({wake_read_.get(), POLLIN, 0});
  fds.push_back({listener_.get(), POLLIN, 0});
  for (const auto &[fd, c] : conns_) {
    short events = c.closing ? 0 : POLLIN;
    if (!c.out.empty()) events |= POLLOUT;
    fds.push_back({fd, events, 0});
  }
  const int n = poll(fds.data(), fds.size(), NextTimeoutMs());
  if (n < 0 && errno != EINTR) return false;
  if (n > 0) {
    if (fds[0].revents != 0) return false;  // stop requested
    if (fds[1].revents & POLLIN) Accept();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = conns_.find(fds[i].fd);
      if (it == conns_.end()) continue;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) ReadFrom(it->second);
    }
  }
  ExpireWaiters();
  for (auto &[fd, c] : conns_) Flush(c);
  Sweep();
  return true;
}

int StoreServer::Loop::NextTimeoutMs() const {
  if (waiters_.empty()) return -1;
  Clock::time_point first = waiters_.front().deadline;
  for (const Waiter &w : waiters_) first = std::min(first, w.deadline);
  return PollTimeoutMs(first);
}

void StoreServer::Loop::Accept() {
  for (;;) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: no more pending; others: retried on the next poll
    SetNoDelay(fd);
    Connection c;
    c.fd = UniqueFd(fd);
    c.peer = PeerName(fd);
    conns_.emplace(fd, std::move(c));
  }
}

void StoreServer::Loop::ReadFrom(Connection &c) {
  uint8_t chunk[kReadChunk];
  bool peer_closed = false;
  for (;;) {
    const ssize_t n = recv(c.fd.get(), chunk, sizeof(chunk), 0);
    if (n > 0) {
      c.in.insert(c.in.end(), chunk, chunk + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    peer_closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    break;
  }
  // Requests that arrived before the close still count: a rank may Set a
  // key and exit right away.
  ParseFrames(c);
  if (peer_closed) c.dead = true;
}

void StoreServer::Loop::ParseFrames(Connection &c) {
  size_t pos = 0;
  while (!c.closing && !c.dead && c.in.size() - pos >= kFrameHeaderBytes) {
    const std::span<const uint8_t> rest(c.in.data() + pos, c.in.size() - pos);
    const Result<uint32_t> size = FrameLength(rest, "the peer");
    if (!size.ok()) {
      Fail(c, size.status().message());
      break;
    }
    if (rest.size() - kFrameHeaderBytes < size.value()) break;
    Handle(c, rest.subspan(kFrameHeaderBytes, size.value()));
    pos += kFrameHeaderBytes + size.value();
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
}

void StoreServer::Loop::Handle(Connection &c, std::span<const uint8_t> payload) {
  Result<Request> request = DecodeRequest(payload);
  if (!request.ok()) return Fail(c, request.status().message());
  const Request &r = request.value();
  if (r.op == Op::kHello) {
    if (c.greeted) return Fail(c, "a second handshake on one connection");
    return HandleHello(c, r);
  }
  if (!c.greeted) return Fail(c, "a request before the handshake: the peer is not a dstrain rank");
  switch (r.op) {
    case Op::kSet:
      return HandleSet(c, r);
    case Op::kAdd:
      return HandleAdd(c, r);
    case Op::kGet:
    case Op::kWait:
      return HandleWait(c, r);
    case Op::kHello:
      break;
  }
}

void StoreServer::Loop::HandleHello(Connection &c, const Request &r) {
  if (r.magic != kMagic) return Fail(c, "the peer is not a dstrain rendezvous client");
  if (r.version != kProtocolVersion) {
    return Fail(c, "store protocol version mismatch: this process speaks version " +
                       std::to_string(r.version) + ", rank 0's store speaks version " +
                       std::to_string(kProtocolVersion) +
                       "; start every rank with the same dstrain build");
  }
  // The token first: a process from another job learns nothing else.
  if (!SameToken(r.token, identity_.job_token)) return Fail(c, TokenMismatchMessage());
  if (r.world_size != identity_.world_size) {
    return Fail(c,
                "world size mismatch: this process has WORLD_SIZE=" + std::to_string(r.world_size) +
                    " but rank 0 (which hosts the store) has "
                    "WORLD_SIZE=" +
                    std::to_string(identity_.world_size) +
                    "; start every rank with the same world size");
  }
  if (r.rank < 0 || r.rank >= identity_.world_size) {
    return Fail(c, "rank " + std::to_string(r.rank) +
                       " is out of range for WORLD_SIZE=" + std::to_string(identity_.world_size));
  }
  const auto held = rank_to_fd_.find(r.rank);
  if (held != rank_to_fd_.end()) {
    const auto holder = conns_.find(held->second);
    const std::string from = holder == conns_.end() ? "" : " from " + holder->second.peer;
    return Fail(c, "rank " + std::to_string(r.rank) + " has already joined the store" + from +
                       ": two processes were started with RANK=" + std::to_string(r.rank));
  }
  rank_to_fd_[r.rank] = c.fd.get();
  c.rank = r.rank;
  c.greeted = true;
  Send(c, Reply{});
}

void StoreServer::Loop::HandleSet(Connection &c, const Request &r) {
  data_[r.keys.front()] = r.value;
  Send(c, Reply{});
  WakeWaiters();
}

void StoreServer::Loop::HandleAdd(Connection &c, const Request &r) {
  const std::string &key = r.keys.front();
  int64_t current = 0;
  const auto found = data_.find(key);
  if (found != data_.end()) {
    const auto *begin = reinterpret_cast<const char *>(found->second.data());
    const auto *end = begin + found->second.size();
    const auto [stop, error] = std::from_chars(begin, end, current);
    if (error != std::errc() || stop != end) {
      return Send(c, ErrorReply("key '" + key + "' holds a value that is not a counter"));
    }
  }
  int64_t next = 0;
  if (__builtin_add_overflow(current, r.number, &next)) {
    return Send(c, ErrorReply("counter '" + key + "' would overflow"));
  }
  data_[key] = DecimalBytes(next);
  Reply reply;
  reply.kind = ReplyKind::kNumber;
  reply.number = next;
  Send(c, reply);
  WakeWaiters();
}

void StoreServer::Loop::HandleWait(Connection &c, const Request &r) {
  Waiter w;
  w.fd = c.fd.get();
  w.op = r.op;
  w.keys = r.keys;
  // A negative timeout means "do not wait"; the client caps huge ones.
  w.deadline = DeadlineAfter(std::chrono::milliseconds(std::max<int64_t>(r.number, 0)));
  if (Present(w.keys)) return Answer(w);
  waiters_.push_back(std::move(w));
}

bool StoreServer::Loop::Present(const std::vector<std::string> &keys) const {
  return std::all_of(keys.begin(), keys.end(),
                     [this](const std::string &k) { return data_.count(k) != 0; });
}

void StoreServer::Loop::Answer(Waiter &w) {
  auto it = conns_.find(w.fd);
  if (it == conns_.end() || it->second.dead) return;
  Reply reply;
  if (!Present(w.keys)) {
    reply.kind = ReplyKind::kTimeout;
    for (const std::string &k : w.keys) {
      if (data_.count(k) == 0) reply.keys.push_back(k);
    }
  } else if (w.op == Op::kGet) {
    reply.kind = ReplyKind::kValue;
    reply.value = data_[w.keys.front()];
  }
  Send(it->second, reply);
}

void StoreServer::Loop::WakeWaiters() {
  auto ready = std::stable_partition(waiters_.begin(), waiters_.end(),
                                     [this](const Waiter &w) { return !Present(w.keys); });
  for (auto it = ready; it != waiters_.end(); ++it) Answer(*it);
  waiters_.erase(ready, waiters_.end());
}

void StoreServer::Loop::ExpireWaiters() {
  const auto now = Clock::now();
  auto expired = std::stable_partition(waiters_.begin(), waiters_.end(),
                                       [now](const Waiter &w) { return w.deadline > now; });
  for (auto it = expired; it != waiters_.end(); ++it) Answer(*it);
  waiters_.erase(expired, waiters_.end());
}

void StoreServer::Loop::Send(Connection &c, const Reply &reply) {
  AppendFrame(EncodeReply(reply), c.out);
}

void StoreServer::Loop::Fail(Connection &c, const std::string &message) {
  Send(c, ErrorReply(message));
  c.closing = true;
}

void StoreServer::Loop::Flush(Connection &c) {
  size_t sent = 0;
  while (sent < c.out.size() && !c.dead) {
    const ssize_t n =
        send(c.fd.get(), c.out.data() + sent, c.out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;  // the rest goes when poll reports POLLOUT
    } else {
      c.dead = true;
    }
  }
  c.out.erase(c.out.begin(), c.out.begin() + static_cast<std::ptrdiff_t>(sent));
  if (c.closing && c.out.empty()) c.dead = true;
}

void StoreServer::Loop::Sweep() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (!it->second.dead) {
      ++it;
      continue;
    }
    const int fd = it->first;
    const auto held = rank_to_fd_.find(it->second.rank);
    if (held != rank_to_fd_.end() && held->second == fd) {
      rank_to_fd_.erase(held);
      RecordDeparture(it->second.rank);
    }
    std::erase_if(waiters_, [fd](const Waiter &w) { return w.fd == fd; });
    it = conns_.erase(it);
  }
}

// A rank's connection closed. It finished if it said so first (TcpStore's
// destructor sets kFinishedKey/<rank>); otherwise it was lost — killed or
// crashed — and survivors learn which rank it was from kLostKey.
void StoreServer::Loop::RecordDeparture(int64_t rank) {
  const std::string r = std::to_string(rank);
  data_[std::string(kDoneKey) + r] = {};
  if (data_.count(std::string(kFinishedKey) + r) == 0) {
    std::vector<uint8_t> &lost = data_[kLostKey];
    if (!lost.empty()) lost.push_back(',');
    lost.insert(lost.end(), r.begin(), r.end());
  }
  WakeWaiters();
}

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string &master_host, int port,
                                                        ServerIdentity identity) {
  Result<Listener> listener = ListenOnAllInterfaces(master_host, port);
  if (!listener.ok()) return listener.status();
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return CommFailure(std::string("creating the store server's wake-up pipe: ") +
                       std::strerror(errno));
  }
  UniqueFd wake_read(pipe_fds[0]);
  std::unique_ptr<StoreServer> server(new StoreServer());
  server->wake_write_ = UniqueFd(pipe_fds[1]);
  server->port_ = listener->port;
  server->loop_ =
      std::make_unique<Loop>(std::move(listener->fd), std::move(wake_read), std::move(identity));
  try {
    server->thread_ = std::thread([loop = server->loop_.get()] { loop->Run(); });
  } catch (const std::system_error &error) {
    return CommFailure(std::string("starting the store server thread: ") + error.what());
  }
  return server;
}

StoreServer::~StoreServer() {
  if (thread_.joinable()) {
    const uint8_t byte = 1;
    ssize_t written = -1;
    do {
      written = write(wake_write_.get(), &byte, 1);
    } while (written < 0 && errno == EINTR);
    thread_.join();
  }
  loop_.reset();  // closes every connection
}

}  // namespace dst::tcp_store
