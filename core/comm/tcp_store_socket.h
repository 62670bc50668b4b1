// Internal to the TCP store: POSIX socket plumbing with deadlines. Every
// blocking step is a poll() bounded by a deadline, so nothing here can hang;
// sends use MSG_NOSIGNAL so a peer that went away is an error, not SIGPIPE.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/common/abort_signal.h"
#include "core/common/status.h"

namespace dst::tcp_store {

using Clock = std::chrono::steady_clock;

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd &&other) noexcept : fd_(other.release()) {}
  UniqueFd &operator=(UniqueFd &&other) noexcept;
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset();

 private:
  int fd_ = -1;
};

// "host:port", with brackets around IPv6 literals ("[::1]:29500").
std::string Endpoint(const std::string &host, int port);

// Milliseconds from now until `deadline` for poll(): 0 when past, rounded
// up, capped at INT_MAX.
int PollTimeoutMs(Clock::time_point deadline);

// Now + `timeout`, saturating instead of overflowing for huge timeouts.
Clock::time_point DeadlineAfter(std::chrono::milliseconds timeout);

Status SetNonBlocking(int fd);
void SetNoDelay(int fd);

// A listening socket on every interface: dual-stack IPv6 when the host has
// IPv6, else IPv4. `port` 0 picks a free port.
struct Listener {
  UniqueFd fd;
  int port = 0;
};
// `master_host` only appears in the error messages.
Result<Listener> ListenOnAllInterfaces(const std::string &master_host, int port);

// "10.1.2.3:45678" for an accepted socket's peer (for messages).
std::string PeerName(int fd);

// Connects to host:port, retrying refused or unreachable connections (the
// server may not be up yet) until the timeout. The result is non-blocking
// with TCP_NODELAY.
Result<UniqueFd> ConnectWithRetry(const std::string &host, int port,
                                  std::chrono::milliseconds timeout);

// Why a transfer stopped: the messages differ (a closed peer is usually a
// dead rank 0; a timeout is usually a slow or missing rank).
// kMalformed: the peer sent bytes that are not a frame of this protocol.
enum class TransferError { kNone, kTimeout, kClosed, kSystem, kMalformed };

struct TransferStatus {
  TransferError error = TransferError::kNone;
  std::string detail;  // strerror text for kSystem, what was wrong for kMalformed
  bool ok() const { return error == TransferError::kNone; }
};

// Sends all of `bytes` on a non-blocking socket before the deadline; once
// `abort` (may be null) is raised, the deadline comes at most 400 ms later.
TransferStatus SendAll(int fd, std::span<const uint8_t> bytes, Clock::time_point deadline,
                       const AbortSignal *abort = nullptr);
// Receives one frame's payload (see tcp_store_wire.h) before the deadline
// (shortened by the abort as SendAll's); a length over kMaxFrameBytes is a
// kSystem error.
TransferStatus ReceiveFrame(int fd, Clock::time_point deadline, std::vector<uint8_t> &payload,
                            const AbortSignal *abort = nullptr);

}  // namespace dst::tcp_store
