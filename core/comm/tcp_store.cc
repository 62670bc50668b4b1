#include "core/comm/tcp_store.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>

namespace dst {
namespace {

using tcp_store::Clock;
using tcp_store::CommFailure;
using tcp_store::Op;
using tcp_store::Reply;
using tcp_store::ReplyKind;
using tcp_store::Request;
using tcp_store::TransferError;

// The server answers a Get/Wait when its timeout expires; the client allows
// this much more before it gives up on the reply itself, so the server's
// "these keys are missing" answer normally arrives first.
constexpr std::chrono::milliseconds kReplyGrace(5000);
// The handshake gets at least this long even when connecting used up the
// timeout: a reachable server answers it at once.
constexpr std::chrono::milliseconds kMinHandshake(1000);

Status ValidateOptions(const TcpStoreOptions &o) {
  const std::string where = "rendezvous store options: ";
  if (o.host.empty()) return InvalidArgument(where + "the master address is empty");
  if (o.world_size < 1) {
    return InvalidArgument(where + "world size must be at least 1, got " +
                           std::to_string(o.world_size));
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return InvalidArgument(where + "rank " + std::to_string(o.rank) +
                           " is out of range for world size " + std::to_string(o.world_size));
  }
  const int min_port = o.is_server ? 0 : 1;
  if (o.port < min_port || o.port > 65535) {
    return InvalidArgument(where + "port must be in " + std::to_string(min_port) + "..65535, got " +
                           std::to_string(o.port));
  }
  if (o.timeout.count() <= 0) {
    return InvalidArgument(where + "timeout must be positive, got " +
                           std::to_string(o.timeout.count()) + " ms");
  }
  return Status::Ok();
}

Status CheckKey(const std::string &key) {
  if (key.size() > tcp_store::kMaxKeyBytes) {
    return InvalidArgument("rendezvous store: key of " + std::to_string(key.size()) +
                           " bytes is longer than the limit of " +
                           std::to_string(tcp_store::kMaxKeyBytes));
  }
  return Status::Ok();
}

// 'a', 'b', 'c' and 4 more
std::string QuoteKeys(const std::vector<std::string> &keys) {
  constexpr size_t kShown = 4;
  std::string text;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) text += ", ";
    text += "'" + keys[i] + "'";
  }
  if (keys.size() > kShown) text += " and " + std::to_string(keys.size() - kShown) + " more";
  return text;
}

int64_t ClampedMs(std::chrono::milliseconds timeout) {
  constexpr int64_t kCap = int64_t{100} * 365 * 24 * 3600 * 1000;  // what DeadlineAfter allows
  return std::clamp<int64_t>(timeout.count(), 0, kCap);
}

Clock::time_point ReplyDeadline(std::chrono::milliseconds timeout) {
  return tcp_store::DeadlineAfter(std::chrono::milliseconds(ClampedMs(timeout)) + kReplyGrace);
}

}  // namespace

TcpStore::TcpStore(const TcpStoreOptions &options, int port)
    : host_(options.host),
      port_(port),
      endpoint_(tcp_store::Endpoint(options.host, port)),
      abort_(options.abort),
      rank_(options.rank),
      world_size_(options.world_size),
      job_token_(options.job_token),
      timeout_(options.timeout) {}

Result<std::unique_ptr<TcpStore>> TcpStore::Open(const TcpStoreOptions &options) {
  DST_RETURN_IF_ERROR(ValidateOptions(options));
  const Clock::time_point deadline = tcp_store::DeadlineAfter(options.timeout);
  std::unique_ptr<tcp_store::StoreServer> server;
  int port = options.port;
  if (options.is_server) {
    auto started = tcp_store::StoreServer::Start(
        options.host, options.port,
        {.job_token = options.job_token, .world_size = options.world_size});
    if (!started.ok()) return started.status();
    server = std::move(started.value());
    port = server->port();
  }
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto fd = tcp_store::ConnectWithRetry(options.host, port,
                                          std::max(left, std::chrono::milliseconds(1)));
    if (!fd.ok()) {
      Status status = fd.status();
      return status.context("rank " + std::to_string(options.rank) + " of " +
                            std::to_string(options.world_size));
    }
    std::unique_ptr<TcpStore> store(new TcpStore(options, port));
    store->server_ = std::move(server);
    store->socket_ = std::move(fd.value());
    bool transport_failed = false;
    Status st =
        store->Handshake(std::max(deadline, Clock::now() + kMinHandshake), &transport_failed);
    if (st.ok()) return store;
    // A server that drops the connection before answering the hello is
    // shutting down: the previous job of this process on the same port
    // (engines created one after another). The next job's server comes up
    // there: connect again until the deadline. A server that answers with an
    // error (a token mismatch) is final.
    if (options.is_server || !transport_failed || Clock::now() >= deadline) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TcpStore::~TcpStore() {
  if (!socket_.valid() || !broken_.empty()) return;
  (void)Set(std::string(kFinishedKey) + std::to_string(rank_), {});
}

void TcpStore::Abort() {
  std::lock_guard<Turns> lock(turns_);
  if (broken_.empty()) broken_ = "this rank's connection was aborted";
  socket_.reset();
}

std::string TcpStore::Where() const {
  return "(rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) +
         ", rendezvous store at " + endpoint_ + ")";
}

Status TcpStore::Handshake(Clock::time_point deadline, bool *transport_failed) {
  Request hello;
  hello.op = Op::kHello;
  hello.token = job_token_;
  hello.rank = rank_;
  hello.world_size = world_size_;
  auto reply = Call(hello, deadline, "joining the rendezvous store " + Where());
  // Bytes that are not this protocol will not improve by connecting again.
  *transport_failed = !reply.ok() && !malformed_reply_;
  if (!reply.ok()) return reply.status();
  if (reply->kind == ReplyKind::kError) {
    // The server's text leads: it says what is wrong ("job token mismatch").
    return CommFailure(reply->message + " " + Where());
  }
  if (reply->kind != ReplyKind::kOk) return Unexpected(reply.value(), "joining " + Where());
  return Status::Ok();
}

void TcpStore::Turns::lock() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = next_++;
  cv_.wait(lock, [&] { return serving_ == ticket; });
}

void TcpStore::Turns::unlock() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++serving_;
  }
  cv_.notify_all();
}

Result<Reply> TcpStore::Call(const Request &request, Clock::time_point deadline,
                             const std::string &doing, bool abortable) {
  try {
    const Clock::time_point queued = Clock::now();
    std::lock_guard<Turns> lock(turns_);
    deadline += Clock::now() - queued;  // our own queue is not the server's delay
    if (!broken_.empty()) return CommFailure(doing + ": " + broken_);
    std::vector<uint8_t> frame;
    tcp_store::AppendFrame(tcp_store::EncodeRequest(request), frame);
    const AbortSignal *abort = abortable ? abort_.get() : nullptr;
    tcp_store::TransferStatus sent = tcp_store::SendAll(socket_.get(), frame, deadline, abort);
    std::vector<uint8_t> payload;
    if (sent.ok()) sent = tcp_store::ReceiveFrame(socket_.get(), deadline, payload, abort);
    if (!sent.ok() && Raised(abort)) {  // cut short: the stream is out of step now
      broken_ = "this rank's engine was aborted";
      return AbortedError(doing);
    }
    if (!sent.ok()) {  // later calls fail at once, naming this one
      malformed_reply_ = sent.error == TransferError::kMalformed;
      broken_ = TransportFailure(sent) + " (while " + doing + ")";
      return CommFailure(doing + ": " + broken_);
    }
    Result<Reply> reply = tcp_store::DecodeReply(payload);
    if (!reply.ok()) {
      malformed_reply_ = true;
      broken_ = reply.status().message() + " from " + endpoint_;
      return CommFailure(doing + ": " + broken_);
    }
    return reply;
  } catch (const std::exception &error) {  // bad_alloc, std::system_error from the mutex
    return InternalError(doing + ": " + error.what());
  }
}

std::string TcpStore::TransportFailure(const tcp_store::TransferStatus &status) const {
  switch (status.error) {
    case TransferError::kClosed:
      return "the rendezvous store at " + endpoint_ +
             " closed the connection: rank 0, which hosts it, has exited or crashed "
             "(check rank 0's output)";
    case TransferError::kTimeout:
      return "no reply from the rendezvous store at " + endpoint_ +
             " in time: rank 0's process is stalled or the network is down";
    case TransferError::kSystem:
    case TransferError::kMalformed:
    case TransferError::kNone:
      break;
  }
  return status.detail + " (rendezvous store at " + endpoint_ + ")";
}

Status TcpStore::Unexpected(const Reply &reply, const std::string &doing) const {
  if (reply.kind == ReplyKind::kError) return CommFailure(doing + ": " + reply.message);
  return CommFailure(doing + ": unexpected reply kind " +
                     std::to_string(static_cast<int>(reply.kind)) + " from " + endpoint_);
}

Status TcpStore::TimedOut(const std::vector<std::string> &missing,
                          std::chrono::milliseconds timeout) const {
  const bool one = missing.size() == 1;
  return CommFailure(
      "timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
      (one ? "key " : "keys ") + QuoteKeys(missing) + " " + Where() + ": " +
      (one ? "the rank that publishes it has" : "the ranks that publish them have") +
      " not got that far; a rank may have crashed or hung (check the other ranks' output), "
      "still be starting, or have been started with a different MASTER_ADDR/MASTER_PORT or "
      "world size");
}

Status TcpStore::Set(const std::string &key, const std::vector<uint8_t> &value) {
  return SetBefore(key, value, tcp_store::DeadlineAfter(timeout_), /*abortable=*/true);
}

Status TcpStore::SetBefore(const std::string &key, const std::vector<uint8_t> &value,
                           Clock::time_point deadline, bool abortable) {
  DST_RETURN_IF_ERROR(CheckKey(key));
  if (value.size() > tcp_store::kMaxFrameBytes - tcp_store::kMaxKeyBytes - 16) {
    return InvalidArgument("rendezvous store: value of " + std::to_string(value.size()) +
                           " bytes for key '" + key + "' is over the store's limit");
  }
  Request request;
  request.op = Op::kSet;
  request.keys = {key};
  request.value = value;
  const std::string doing = "setting key '" + key + "' " + Where();
  auto reply = Call(request, deadline, doing, abortable);
  if (!reply.ok()) return reply.status();
  if (reply->kind != ReplyKind::kOk) return Unexpected(reply.value(), doing);
  return Status::Ok();
}

// Blocking waits are sent in slices of at most kWaitSlice, releasing the
// connection between them, so another thread of this rank (the heartbeat)
// can use it while one waits for a key for minutes.
constexpr std::chrono::milliseconds kWaitSlice(250);

Result<std::vector<uint8_t>> TcpStore::Get(const std::string &key,
                                           std::chrono::milliseconds timeout) {
  DST_RETURN_IF_ERROR(CheckKey(key));
  const std::string doing = "getting key '" + key + "' " + Where();
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (Raised(abort_.get())) return AbortedError(doing);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto slice = std::max(std::chrono::milliseconds(0), std::min(left, kWaitSlice));
    Request request;
    request.op = Op::kGet;
    request.keys = {key};
    request.number = ClampedMs(slice);
    auto reply = Call(request, ReplyDeadline(slice), doing);
    if (!reply.ok()) return reply.status();
    if (reply->kind == ReplyKind::kValue) return std::move(reply.value().value);
    if (reply->kind != ReplyKind::kTimeout) return Unexpected(reply.value(), doing);
    if (Clock::now() >= deadline) return TimedOut({key}, timeout);
  }
}

Status TcpStore::Wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) {
  if (keys.size() > tcp_store::kMaxKeysPerWait) {
    return InvalidArgument("rendezvous store: waiting for " + std::to_string(keys.size()) +
                           " keys at once is over the limit of " +
                           std::to_string(tcp_store::kMaxKeysPerWait));
  }
  for (const std::string &key : keys) DST_RETURN_IF_ERROR(CheckKey(key));
  const std::string doing = "waiting for keys " + QuoteKeys(keys) + " " + Where();
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (Raised(abort_.get())) return AbortedError(doing);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto slice = std::max(std::chrono::milliseconds(0), std::min(left, kWaitSlice));
    Request request;
    request.op = Op::kWait;
    request.keys = keys;
    request.number = ClampedMs(slice);
    auto reply = Call(request, ReplyDeadline(slice), doing);
    if (!reply.ok()) return reply.status();
    if (reply->kind == ReplyKind::kOk) return Status::Ok();
    if (reply->kind != ReplyKind::kTimeout) return Unexpected(reply.value(), doing);
    if (Clock::now() >= deadline) return TimedOut(reply->keys, timeout);
  }
}

// The last beat of an aborted rank: not cut short by the abort, and bounded
// by `timeout` rather than the store's (a stalled rank 0 must not hold the
// abort up).
Status TcpStore::SetWithin(const std::string &key, const std::vector<uint8_t> &value,
                           std::chrono::milliseconds timeout) {
  return SetBefore(key, value, tcp_store::DeadlineAfter(timeout), /*abortable=*/false);
}

Result<int64_t> TcpStore::Add(const std::string &key, int64_t delta) {
  DST_RETURN_IF_ERROR(CheckKey(key));
  Request request;
  request.op = Op::kAdd;
  request.keys = {key};
  request.number = delta;
  const std::string doing = "adding to counter '" + key + "' " + Where();
  auto reply = Call(request, tcp_store::DeadlineAfter(timeout_), doing);
  if (!reply.ok()) return reply.status();
  if (reply->kind != ReplyKind::kNumber) return Unexpected(reply.value(), doing);
  return reply->number;
}

}  // namespace dst
