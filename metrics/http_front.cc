#include "metrics/http_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <list>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace dst::metrics {

namespace {

using Clock = std::chrono::steady_clock;

// Owns a descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd &operator=(Fd &&other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

std::string ErrnoText(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// "1.2.3.4" / "::1".
std::string PeerAddress(const sockaddr_storage &addr) {
  char text[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6 &>(addr).sin6_addr, text, sizeof text);
  } else {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in &>(addr).sin_addr, text, sizeof text);
  }
  return text;
}

// Past this many bytes waiting in one direction of a relay, that side is not
// read until the other has taken some.
constexpr size_t kRelayBuffer = size_t(1) << 20;

constexpr std::string_view kHeaderTooLarge =
    "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: "
    "close\r\n\r\n";
constexpr std::string_view kBackendDown =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

enum class Phase {
  kHeader,      // the client is sending its request headers
  kConnecting,  // headers complete; connecting to the backend
  kRelay,       // bytes flow both ways until the backend has answered
  kFlush,       // an answer of the front's own is written, then closed
};

struct Session {
  Fd client;
  Fd backend;
  std::string peer;
  Phase phase = Phase::kHeader;
  std::string in;          // kHeader: what the client sent so far
  std::string to_backend;  // read from the client, not yet written to the backend
  std::string to_client;   // read from the backend (or the front's answer), not yet written
  bool client_eof = false;
  bool backend_eof = false;
  bool backend_shut = false;  // the client's end of input passed on
  bool closed = false;        // to be removed at the end of this round
  Clock::time_point deadline;
};

enum class IoResult { kProgress, kWouldBlock, kEof, kError };

// Reads what is there (up to `limit` bytes in `buffer`) from a non-blocking socket.
IoResult ReadInto(int fd, std::string &buffer, size_t limit) {
  IoResult result = IoResult::kWouldBlock;
  std::array<char, 16384> chunk;
  while (buffer.size() < limit) {
    const ssize_t n = ::recv(fd, chunk.data(), std::min(chunk.size(), limit - buffer.size()), 0);
    if (n > 0) {
      buffer.append(chunk.data(), size_t(n));
      result = IoResult::kProgress;
      continue;
    }
    if (n == 0) return IoResult::kEof;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return result;
    return IoResult::kError;
  }
  return result;
}

// Writes what the socket takes of `buffer`, dropping the written bytes.
IoResult WriteFrom(int fd, std::string &buffer) {
  IoResult result = IoResult::kWouldBlock;
  while (!buffer.empty()) {
    const ssize_t n = ::send(fd, buffer.data(), buffer.size(), MSG_NOSIGNAL);
    if (n > 0) {
      buffer.erase(0, size_t(n));
      result = IoResult::kProgress;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return result;
    return IoResult::kError;
  }
  return result;
}

// The end of the request headers in `in` (just past the blank line), or npos.
size_t HeaderEnd(const std::string &in) {
  const size_t crlf = in.find("\r\n\r\n");
  const size_t lf = in.find("\n\n");
  if (crlf == std::string::npos && lf == std::string::npos) return std::string::npos;
  if (lf == std::string::npos || (crlf != std::string::npos && crlf < lf)) return crlf + 4;
  return lf + 2;
}

}  // namespace

struct HttpFront::Loop {
  HttpFrontOptions options;
  Fd listener;
  Fd wake_read;
  Fd wake_write;
  int port = 0;
  std::list<Session> sessions;  // oldest first
  std::thread thread;

  void Run();
  void Accept(Clock::time_point now);
  void MakeRoomFor(const std::string &peer);
  void OnClient(Session &s, short revents, Clock::time_point now);
  void OnBackend(Session &s, short revents, Clock::time_point now);
  void StartRelay(Session &s, size_t header_end, Clock::time_point now);
  void Answer(Session &s, std::string_view response, Clock::time_point now);
  void Settle(Session &s) const;
};

void HttpFront::Loop::Run() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Session *, bool>> owner;  // (session, is the backend) per fds entry
  for (;;) {
    fds.assign({{wake_read.get(), POLLIN, 0}, {listener.get(), POLLIN, 0}});
    owner.assign(2, {nullptr, false});
    Clock::time_point now = Clock::now();
    Clock::time_point next = now + std::chrono::seconds(1);
    for (Session &s : sessions) {
      short client = 0;
      short backend = 0;
      switch (s.phase) {
        case Phase::kHeader:
          client = POLLIN;
          break;
        case Phase::kConnecting:
          backend = POLLOUT;
          break;
        case Phase::kRelay:
          if (!s.client_eof && s.to_backend.size() < kRelayBuffer) client |= POLLIN;
          if (!s.to_client.empty()) client |= POLLOUT;
          if (!s.backend_eof && s.to_client.size() < kRelayBuffer) backend |= POLLIN;
          if (!s.to_backend.empty()) backend |= POLLOUT;
          break;
        case Phase::kFlush:
          client = POLLOUT;
          break;
      }
      // An fd with no events still reports hang-ups and errors.
      fds.push_back({s.client.get(), client, 0});
      owner.emplace_back(&s, false);
      if (s.backend.get() >= 0) {
        fds.push_back({s.backend.get(), backend, 0});
        owner.emplace_back(&s, true);
      }
      next = std::min(next, s.deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    const int ready = ::poll(fds.data(), fds.size(), int(std::max<int64_t>(wait, 0)) + 1);
    if (ready < 0 && errno != EINTR) return;  // nothing sensible left to do
    if (fds[0].revents != 0) return;          // stop
    now = Clock::now();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0 || owner[i].first->closed) continue;
      if (owner[i].second) {
        OnBackend(*owner[i].first, fds[i].revents, now);
      } else {
        OnClient(*owner[i].first, fds[i].revents, now);
      }
    }
    if (fds[1].revents != 0) Accept(now);
    for (auto it = sessions.begin(); it != sessions.end();) {
      Settle(*it);
      if (!it->closed && now >= it->deadline) it->closed = true;  // header or idle timeout
      it = it->closed ? sessions.erase(it) : std::next(it);
    }
  }
}

void HttpFront::Loop::Accept(Clock::time_point now) {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t length = sizeof addr;
    const int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr *>(&addr), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the oldest unfinished request gives one back.
        auto oldest = std::find_if(sessions.begin(), sessions.end(), [](const Session &s) {
          return !s.closed && s.phase == Phase::kHeader;
        });
        if (oldest != sessions.end()) {
          oldest->client.reset();
          oldest->closed = true;
          continue;
        }
      }
      return;  // EAGAIN: all accepted
    }
    Session s;
    s.client = Fd(fd);
    s.peer = PeerAddress(addr);
    s.deadline = now + options.header_timeout;
    MakeRoomFor(s.peer);
    sessions.push_back(std::move(s));
  }
}

// Closes the oldest unfinished requests so that one more from `peer` stays
// within both bounds.
void HttpFront::Loop::MakeRoomFor(const std::string &peer) {
  int pending = 0;
  int from_peer = 0;
  for (const Session &s : sessions) {
    if (s.closed || s.phase != Phase::kHeader) continue;
    ++pending;
    if (s.peer == peer) ++from_peer;
  }
  for (Session &s : sessions) {
    if (pending < options.max_pending && from_peer < options.max_pending_per_client) break;
    if (s.closed || s.phase != Phase::kHeader) continue;
    const bool same = s.peer == peer;
    if (pending < options.max_pending && !same) continue;
    s.closed = true;
    --pending;
    if (same) --from_peer;
  }
}

void HttpFront::Loop::OnClient(Session &s, short revents, Clock::time_point now) {
  if (s.phase == Phase::kHeader) {
    const IoResult r = ReadInto(s.client.get(), s.in, options.max_header_bytes + 1);
    const size_t end = HeaderEnd(s.in);
    if (end != std::string::npos) return StartRelay(s, end, now);
    if (s.in.size() > options.max_header_bytes) return Answer(s, kHeaderTooLarge, now);
    if (r == IoResult::kEof || r == IoResult::kError) s.closed = true;
    return;
  }
  if (s.phase == Phase::kFlush) {
    const IoResult w = WriteFrom(s.client.get(), s.to_client);
    if (w == IoResult::kError || s.to_client.empty()) s.closed = true;
    return;
  }
  if (s.phase != Phase::kRelay) {
    if (revents & (POLLERR | POLLHUP)) s.closed = true;  // gone while the backend connects
    return;
  }
  if ((revents & POLLOUT) && !s.to_client.empty()) {
    const IoResult w = WriteFrom(s.client.get(), s.to_client);
    if (w == IoResult::kError) {
      s.closed = true;
      return;
    }
    if (w == IoResult::kProgress) s.deadline = now + options.idle_timeout;
  }
  if ((revents & (POLLIN | POLLHUP | POLLERR)) && !s.client_eof) {
    const IoResult r = ReadInto(s.client.get(), s.to_backend, kRelayBuffer);
    if (r == IoResult::kError) {
      s.closed = true;
      return;
    }
    if (r == IoResult::kEof) s.client_eof = true;
    if (r == IoResult::kProgress) s.deadline = now + options.idle_timeout;
  }
}

void HttpFront::Loop::OnBackend(Session &s, short revents, Clock::time_point now) {
  if (s.phase == Phase::kConnecting) {
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(s.backend.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    if (error != 0) return Answer(s, kBackendDown, now);
    s.phase = Phase::kRelay;
    revents |= POLLOUT;
  }
  if (s.phase != Phase::kRelay) return;
  if ((revents & POLLOUT) && !s.to_backend.empty()) {
    const IoResult w = WriteFrom(s.backend.get(), s.to_backend);
    if (w == IoResult::kError) {
      s.to_backend.clear();  // the backend stopped reading: its answer may still come
      s.backend_shut = true;
    }
    if (w == IoResult::kProgress) s.deadline = now + options.idle_timeout;
  }
  if ((revents & (POLLIN | POLLHUP | POLLERR)) && !s.backend_eof) {
    const IoResult r = ReadInto(s.backend.get(), s.to_client, kRelayBuffer);
    if (r == IoResult::kEof || r == IoResult::kError) s.backend_eof = true;
    if (r == IoResult::kProgress) s.deadline = now + options.idle_timeout;
  }
}

void HttpFront::Loop::StartRelay(Session &s, size_t header_end, Clock::time_point now) {
  // The client's address travels in a header of ours, right after the
  // request line, where the backend finds it first.
  const size_t line_end = s.in.find('\n');
  s.to_backend = s.in.substr(0, line_end + 1) + kPeerHeader + ": " + options.peer_secret + " " +
                 s.peer + "\r\n" + s.in.substr(line_end + 1);
  (void)header_end;  // whatever followed the headers (a body) is passed on as it is
  s.in.clear();
  s.in.shrink_to_fit();
  s.deadline = now + options.idle_timeout;
  s.backend = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (s.backend.get() < 0) return Answer(s, kBackendDown, now);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options.backend_port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s.backend.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0) {
    s.phase = Phase::kRelay;
  } else if (errno == EINPROGRESS || errno == EINTR) {
    s.phase = Phase::kConnecting;
  } else {
    Answer(s, kBackendDown, now);
  }
}

void HttpFront::Loop::Answer(Session &s, std::string_view response, Clock::time_point now) {
  s.backend.reset();
  s.in.clear();
  s.to_backend.clear();
  s.to_client.assign(response);
  s.phase = Phase::kFlush;
  s.deadline = now + std::chrono::seconds(5);
}

// Passes a client's end of input on, and closes an exchange that is over.
void HttpFront::Loop::Settle(Session &s) const {
  if (s.closed || s.phase != Phase::kRelay) return;
  if (s.client_eof && s.to_backend.empty() && !s.backend_shut) {
    ::shutdown(s.backend.get(), SHUT_WR);
    s.backend_shut = true;
  }
  if (s.backend_eof && s.to_client.empty()) s.closed = true;
}

HttpFront::HttpFront(std::unique_ptr<Loop> loop) : loop_(std::move(loop)) {}

HttpFront::~HttpFront() {
  const char stop = 1;
  (void)!::write(loop_->wake_write.get(), &stop, 1);
  if (loop_->thread.joinable()) loop_->thread.join();
}

int HttpFront::port() const {
  return loop_->port;
}

Result<std::unique_ptr<HttpFront>> HttpFront::Start(const HttpFrontOptions &options,
                                                    int *bind_error) {
  *bind_error = 0;
  auto loop = std::make_unique<Loop>();
  loop->options = options;
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = AF_INET;
  const std::string &host = options.host;
  if (!host.empty() && host.front() == '[') {
    auto *a6 = reinterpret_cast<sockaddr_in6 *>(&storage);
    family = a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(options.port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6->sin6_addr) != 1)
      return InvalidArgument("the metrics HTTP host " + host + " is not an IPv6 address");
    length = sizeof(sockaddr_in6);
  } else {
    auto *a4 = reinterpret_cast<sockaddr_in *>(&storage);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(options.port));
    if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1)
      return InvalidArgument("the metrics HTTP host " + host + " is not an IPv4 address");
    length = sizeof(sockaddr_in);
  }
  const std::string address = host + ":" + std::to_string(options.port);
  loop->listener = Fd(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (loop->listener.get() < 0)
    return IoError("the metrics HTTP server cannot open a socket: " + ErrnoText(errno));
  const int on = 1;
  ::setsockopt(loop->listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (family == AF_INET6)
    ::setsockopt(loop->listener.get(), IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  if (::bind(loop->listener.get(), reinterpret_cast<sockaddr *>(&storage), length) != 0) {
    *bind_error = errno;
    return IoError("the metrics HTTP server cannot listen on " + address + ": " + ErrnoText(errno));
  }
  if (::listen(loop->listener.get(), 1024) != 0)
    return IoError("the metrics HTTP server cannot listen on " + address + ": " + ErrnoText(errno));
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof bound;
  if (::getsockname(loop->listener.get(), reinterpret_cast<sockaddr *>(&bound), &bound_length) != 0)
    return IoError("the metrics HTTP server cannot read its port: " + ErrnoText(errno));
  loop->port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6 &>(bound).sin6_port
                                        : reinterpret_cast<sockaddr_in &>(bound).sin_port);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0)
    return IoError("the metrics HTTP server cannot make a pipe: " + ErrnoText(errno));
  loop->wake_read = Fd(pipe_fds[0]);
  loop->wake_write = Fd(pipe_fds[1]);
  Loop *raw = loop.get();
  try {
    loop->thread = std::thread([raw] { raw->Run(); });
  } catch (const std::system_error &e) {
    return IoError(std::string("the metrics HTTP server cannot start its thread: ") + e.what());
  }
  return std::unique_ptr<HttpFront>(new HttpFront(std::move(loop)));
}

}  // namespace dst::metrics
