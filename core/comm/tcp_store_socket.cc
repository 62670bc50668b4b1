#include "core/comm/tcp_store_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/comm/tcp_store_wire.h"

namespace dst::tcp_store {
namespace {

std::string ErrnoText(int error) {
  return std::strerror(error);
}

// getaddrinfo results, freed on scope exit.
struct AddrInfoList {
  addrinfo *head = nullptr;
  ~AddrInfoList() {
    if (head != nullptr) freeaddrinfo(head);
  }
};

// How long a transfer may still take once the abort signal is raised: a
// healthy server's reply (at most a 250 ms wait slice) still arrives, so the
// stream stays in step for the aborted rank's last beat; a stalled one does
// not hold the abort up.
constexpr std::chrono::milliseconds kAfterAbort(400);

// Waits for `events` on fd until the deadline. Returns the revents, 0 on
// timeout, -1 with errno on failure. With `abort` (may be null), the wait is
// cut into 100 ms slices to look at it, and once it is raised the deadline
// comes at most kAfterAbort later.
int PollOne(int fd, short events, Clock::time_point deadline, const AbortSignal *abort = nullptr) {
  bool shortened = false;
  for (;;) {
    if (!shortened && Raised(abort)) {
      deadline = std::min(deadline, Clock::now() + kAfterAbort);
      shortened = true;
    }
    const Clock::time_point until =
        abort ? std::min(deadline, Clock::now() + std::chrono::milliseconds(100)) : deadline;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, PollTimeoutMs(until));
    if (n > 0) return p.revents;
    if (n == 0 && until >= deadline) return 0;
    if (n < 0 && errno != EINTR) return -1;
  }
}

// One bind attempt: family AF_INET6 (dual-stack) or AF_INET, wildcard address.
Result<Listener> BindWildcard(int family, int port, int *bind_errno) {
  *bind_errno = 0;
  UniqueFd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *bind_errno = errno;
    return CommFailure("socket: " + ErrnoText(errno));
  }
  // SO_REUSEADDR lets a restarted job reuse a port whose old connections sit
  // in TIME_WAIT; Linux still refuses a port someone is listening on.
  const int one = 1, zero = 0;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    auto *a6 = reinterpret_cast<sockaddr_in6 *>(&addr);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    auto *a4 = reinterpret_cast<sockaddr_in *>(&addr);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  }
  if (bind(fd.get(), reinterpret_cast<sockaddr *>(&addr), len) != 0 ||
      listen(fd.get(), SOMAXCONN) != 0) {
    *bind_errno = errno;
    return CommFailure(ErrnoText(errno));
  }
  Listener listener;
  socklen_t got = sizeof(addr);
  getsockname(fd.get(), reinterpret_cast<sockaddr *>(&addr), &got);
  listener.port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6 *>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in *>(&addr)->sin_port);
  DST_RETURN_IF_ERROR(SetNonBlocking(fd.get()));
  listener.fd = std::move(fd);
  return listener;
}

// A non-blocking connect to one resolved address, finished within the
// deadline. Returns the errno of the failure (0 on success).
int ConnectOnce(const addrinfo &ai, Clock::time_point deadline, UniqueFd *out) {
  UniqueFd fd(socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol));
  if (!fd.valid()) return errno;
  if (!SetNonBlocking(fd.get()).ok()) return errno;
  if (connect(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    const int revents = PollOne(fd.get(), POLLOUT, deadline);
    if (revents == 0) return ETIMEDOUT;
    if (revents < 0) return errno;
    int error = 0;
    socklen_t len = sizeof(error);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) return error;
  }
  SetNoDelay(fd.get());
  *out = std::move(fd);
  return 0;
}

// Reads exactly `size` bytes into `out` before the deadline.
TransferStatus ReceiveExactly(int fd, uint8_t *out, size_t size, Clock::time_point deadline,
                              const AbortSignal *abort) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = recv(fd, out + done, size - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return {TransferError::kClosed, ""};
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      if (errno == ECONNRESET) return {TransferError::kClosed, ""};
      return {TransferError::kSystem, "recv: " + ErrnoText(errno)};
    }
    const int revents = PollOne(fd, POLLIN, deadline, abort);
    if (revents == 0) return {TransferError::kTimeout, ""};
    if (revents < 0) return {TransferError::kSystem, "poll: " + ErrnoText(errno)};
    // POLLHUP/POLLERR: the next recv reports what happened.
  }
  return {};
}

}  // namespace

UniqueFd &UniqueFd::operator=(UniqueFd &&other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string Endpoint(const std::string &host, int port) {
  const bool ipv6_literal = host.find(':') != std::string::npos;
  return (ipv6_literal ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

int PollTimeoutMs(Clock::time_point deadline) {
  const auto now = Clock::now();
  if (deadline <= now) return 0;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<int>(std::min<int64_t>(left, INT_MAX));
}

Clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) {
  // Saturate at ~100 years: Clock::time_point::max() - now would overflow.
  constexpr std::chrono::milliseconds kCap = std::chrono::hours(24 * 365 * 100);
  return Clock::now() + std::clamp(timeout, std::chrono::milliseconds(0), kCap);
}

Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return CommFailure("fcntl(O_NONBLOCK): " + ErrnoText(errno));
  }
  return Status::Ok();
}

void SetNoDelay(int fd) {
  // Requests and replies are small and strictly alternate: Nagle would only
  // add latency to every rendezvous step.
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Result<Listener> ListenOnAllInterfaces(const std::string &master_host, int port) {
  int error = 0;
  Result<Listener> listener = BindWildcard(AF_INET6, port, &error);
  // A host without IPv6 (module off, or disabled by sysctl) fails with
  // something other than "in use": fall back to IPv4 only.
  if (!listener.ok() && error != EADDRINUSE && error != EACCES) {
    listener = BindWildcard(AF_INET, port, &error);
  }
  if (listener.ok()) return listener;
  const std::string where = "cannot host the rendezvous store at " + Endpoint(master_host, port) +
                            " (MASTER_ADDR:MASTER_PORT)";
  if (error == EADDRINUSE) {
    return CommFailure(where + ": port " + std::to_string(port) +
                       " is already in use by another process (another job, or a previous run "
                       "still shutting down): choose another port with --master-port / "
                       "MASTER_PORT");
  }
  if (error == EACCES) {
    return CommFailure(where +
                       ": permission denied (ports below 1024 need privileges): choose "
                       "another port with --master-port / MASTER_PORT");
  }
  return CommFailure(where + ": " + listener.status().message());
}

std::string PeerName(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) return "unknown peer";
  char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<sockaddr *>(&addr), len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown peer";
  }
  std::string name = host;
  // Dual-stack sockets report IPv4 peers as ::ffff:a.b.c.d.
  if (name.rfind("::ffff:", 0) == 0 && name.find('.') != std::string::npos) name = name.substr(7);
  return Endpoint(name, std::atoi(port));
}

Result<UniqueFd> ConnectWithRetry(const std::string &host, int port,
                                  std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = DeadlineAfter(timeout);
  const std::string endpoint = Endpoint(host, port);
  const std::string service = std::to_string(port);
  auto backoff = std::chrono::milliseconds(20);
  std::string last_error = "no attempt made";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    AddrInfoList list;
    const int gai = getaddrinfo(host.c_str(), service.c_str(), &hints, &list.head);
    if (gai == EAI_NONAME || gai == EAI_SERVICE || gai == EAI_FAMILY) {
      // A name that does not exist will not appear by waiting.
      return CommFailure("cannot resolve the rendezvous store address '" + host +
                         "' (MASTER_ADDR): " + gai_strerror(gai));
    }
    if (gai != 0) last_error = std::string("resolving '") + host + "': " + gai_strerror(gai);
    for (const addrinfo *ai = list.head; ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd;
      const int error = ConnectOnce(*ai, deadline, &fd);
      if (error == 0) return fd;
      last_error = ErrnoText(error);
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    // Rank 0 may still be starting: retry, backing off to at most 1 s.
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return CommFailure("could not reach the rendezvous store at " + endpoint + " within " +
                     std::to_string(timeout.count()) + " ms (last error: " + last_error +
                     "): rank 0 hosts it; check that rank 0 was started and is running, "
                     "that MASTER_ADDR/MASTER_PORT are the same on every rank, and that no "
                     "firewall blocks the port");
}

TransferStatus SendAll(int fd, std::span<const uint8_t> bytes, Clock::time_point deadline,
                       const AbortSignal *abort) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) return {TransferError::kClosed, ""};
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return {TransferError::kSystem, "send: " + ErrnoText(errno)};
    }
    const int revents = PollOne(fd, POLLOUT, deadline, abort);
    if (revents == 0) return {TransferError::kTimeout, ""};
    if (revents < 0) return {TransferError::kSystem, "poll: " + ErrnoText(errno)};
  }
  return {};
}

TransferStatus ReceiveFrame(int fd, Clock::time_point deadline, std::vector<uint8_t> &payload,
                            const AbortSignal *abort) {
  uint8_t header[kFrameHeaderBytes];
  TransferStatus status = ReceiveExactly(fd, header, sizeof(header), deadline, abort);
  if (!status.ok()) return status;
  const Result<uint32_t> size = FrameLength(header, "the peer");
  if (!size.ok()) return {TransferError::kMalformed, size.status().message()};
  payload.resize(size.value());
  return ReceiveExactly(fd, payload.data(), size.value(), deadline, abort);
}

}  // namespace dst::tcp_store
