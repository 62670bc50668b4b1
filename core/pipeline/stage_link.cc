#include "core/pipeline/stage_link.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "core/comm/work_order.h"

namespace dst {

namespace {
using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
constexpr int64_t kMaxMicroBatches = int64_t(1) << 20;  // what a tag can name
constexpr int64_t kMaxVirtualStages = 512;
}  // namespace

StageLink::StageLink(Communicator *p2p, Communicator *pp, std::vector<ChunkShape> chunks,
                     int64_t max_rows, MemoryTracker *tracker, StepPlacement placement)
    : p2p_(p2p),
      pp_(pp),
      chunks_(std::move(chunks)),
      max_rows_(max_rows),
      tracker_(tracker),
      placement_(placement) {
  for (const ChunkShape &c : chunks_) max_width_ = std::max({max_width_, c.in_width, c.out_width});
}

StageLink::~StageLink() {
  (void)Reap(/*all=*/true);
  for (std::vector<Posted> &kind : posted_)
    for (Posted &p : kind)
      if (p.work) (void)p.work->Wait();
}

Status StageLink::BeginStep(int64_t micro_batches, int64_t rows, bool training) {
  if (micro_batches >= kMaxMicroBatches)
    return InvalidArgument("a pipeline step takes at most " + std::to_string(kMaxMicroBatches - 1) +
                           " micro-batches; this one has " + std::to_string(micro_batches));
  if (stages() * virtual_stages() > kMaxVirtualStages)
    return InvalidArgument("at most " + std::to_string(kMaxVirtualStages) +
                           " pipeline stages x virtual stages");
  DST_RETURN_IF_ERROR(Reap(/*all=*/true));
  for (Held &h : held_) {  // a failed step may have left buffers held
    Free(&h.activation_in), Free(&h.output), Free(&h.gradient_in), Free(&h.gradient_out);
  }
  for (std::vector<Posted> &kind : posted_)
    for (Posted &p : kind) {
      if (p.work) (void)p.work->Wait();  // left by a failed step
      p.work.reset();
      Free(&p.buffer);
    }
  for (int b : exchange_sends_) free_.push_back(b);  // an exchange a failed step left open
  exchange_.clear(), exchange_sends_.clear(), exchange_what_.clear();
  micro_batches_ = micro_batches;
  rows_ = rows;
  const size_t keys = size_t(micro_batches * virtual_stages());
  if (held_.size() < keys) held_.resize(keys);
  for (std::vector<Posted> &kind : posted_) kind.resize(size_t(virtual_stages()));
  ResetTimes();
  if (ordered()) return Status::Ok();  // a stream-ordered transport: nothing posted ahead
  for (int64_t c = 0; c < virtual_stages(); ++c) {
    if (!is_first(c)) DST_RETURN_IF_ERROR(PostReceive(kActivation, c, 0));
    if (training && !is_last(c)) DST_RETURN_IF_ERROR(PostReceive(kGradient, c, 0));
  }
  return Status::Ok();
}

uint32_t StageLink::Tag(Kind kind, int64_t to_virtual_stage, int64_t mb) const {
  return (uint32_t(kind) << 30) | (uint32_t(to_virtual_stage) << 20) | uint32_t(mb);
}

Result<int> StageLink::Acquire() {
  if (free_.empty()) DST_RETURN_IF_ERROR(Reap(/*all=*/false));
  if (free_.empty()) {  // the pool grows to the schedule's peak in the first step
    const size_t n = size_t(max_rows_ * max_width_);
    pool_.emplace_back(tracker_, MemoryCategory::kCommunication, n, placement_.memory);
    free_.reserve(pool_.size());
    return int(pool_.size() - 1);
  }
  const int b = free_.back();
  free_.pop_back();
  return b;
}

void StageLink::Free(int *buffer) {
  if (*buffer < 0) return;
  free_.push_back(*buffer);
  *buffer = -1;
}

Status StageLink::Reap(bool all) {
  Status first;
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending &p = pending_[i];
    if (!all && !p.work->Test()) {
      if (kept != i) pending_[kept] = std::move(p);
      ++kept;
      continue;
    }
    Status st = p.work->Wait();
    free_.push_back(p.buffer);
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  pending_.erase(pending_.begin() + std::ptrdiff_t(kept), pending_.end());
  return first;
}

Status StageLink::Post(Kind kind, int64_t to_virtual_stage, int64_t mb, int buffer, int64_t bytes,
                       double *seconds) {
  bytes_sent_ += bytes;
  if (ordered()) {
    exchange_sends_.push_back(buffer);
    Collect(true, kind, to_virtual_stage, mb, buffer, bytes, Tag(kind, to_virtual_stage, mb),
            seconds);
    return Status::Ok();
  }
  const auto t0 = Clock::now();
  pending_.push_back({p2p_->Send(pool_[size_t(buffer)].data(), bytes, RankOf(to_virtual_stage),
                                 Tag(kind, to_virtual_stage, mb)),
                      buffer});
  *seconds += SecondsSince(t0);
  return Status::Ok();
}

int64_t StageLink::Bytes(Kind kind, int64_t chunk) const {
  const ChunkShape &c = chunks_[size_t(chunk)];
  return rows_ * (kind == kActivation ? c.in_width : c.out_width) * int64_t(sizeof(float));
}

Status StageLink::PostReceive(Kind kind, int64_t chunk, int64_t mb) {
  Posted &p = posted_[kind][size_t(chunk)];
  Result<int> b = Acquire();
  if (!b.ok()) return b.status();
  const int64_t vs = virtual_stage(chunk);
  const int64_t from = kind == kActivation ? vs - 1 : vs + 1;
  p.buffer = b.value();
  p.mb = mb;
  p.work = p2p_->Recv(pool_[size_t(p.buffer)].data(), Bytes(kind, chunk), RankOf(from),
                      Tag(kind, vs, mb));
  return Status::Ok();
}

Status StageLink::Receive(Kind kind, int64_t chunk, int64_t mb, int *buffer, double *seconds) {
  const auto t0 = Clock::now();
  Posted &p = posted_[kind][size_t(chunk)];
  if (p.mb != mb || !p.work) {  // not the one posted ahead: a program out of order
    if (p.work)
      return InternalError("pipeline: receive of micro-batch " + std::to_string(mb) +
                           " while micro-batch " + std::to_string(p.mb) + " was expected next");
    DST_RETURN_IF_ERROR(PostReceive(kind, chunk, mb));
  }
  Status st = p.work->Wait();
  p.work.reset();
  *buffer = p.buffer;
  p.buffer = -1;
  *seconds += SecondsSince(t0);
  if (!st.ok()) {
    const int64_t vs = virtual_stage(chunk);
    return st.context(std::string("pipeline stage ") + std::to_string(stage()) + " receiving the " +
                      (kind == kActivation ? "activations" : "gradients") + " of micro-batch " +
                      std::to_string(mb) + " from stage " +
                      std::to_string(RankOf(kind == kActivation ? vs - 1 : vs + 1)));
  }
  if (mb + 1 < micro_batches_) return PostReceive(kind, chunk, mb + 1);
  return Status::Ok();
}

Status StageLink::ReceiveHeld(Kind kind, int64_t chunk, int64_t mb, int64_t rows) {
  if (rows != rows_)
    return InternalError("pipeline: micro-batch of " + std::to_string(rows) +
                         " rows in a step of " + std::to_string(rows_));
  Held &h = held_[Key(chunk, mb)];
  int *slot = kind == kActivation ? &h.activation_in : &h.gradient_in;
  Free(slot);
  double *seconds = kind == kActivation ? &times_.recv_input : &times_.recv_grad;
  if (!ordered()) return Receive(kind, chunk, mb, slot, seconds);
  Result<int> b = Acquire();  // into a fresh buffer, in the open exchange
  if (!b.ok()) return b.status();
  *slot = b.value();
  const int64_t vs = virtual_stage(chunk);
  Collect(false, kind, kind == kActivation ? vs - 1 : vs + 1, mb, *slot, Bytes(kind, chunk),
          Tag(kind, vs, mb), seconds);
  return Status::Ok();
}

void StageLink::Collect(bool send, Kind kind, int64_t peer_virtual_stage, int64_t mb, int b,
                        int64_t bytes, uint32_t tag, double *seconds) {
  exchange_.push_back({send, pool_[size_t(b)].data(), bytes, RankOf(peer_virtual_stage), tag});
  if (exchange_.size() == 1) exchange_clock_ = seconds;
  exchange_what_ += std::string(exchange_what_.empty() ? "" : ", ") +
                    (send ? "sending " : "receiving ") +
                    (kind == kActivation ? "the activations" : "the gradients") +
                    " of micro-batch " + std::to_string(mb) + (send ? " to" : " from") + " stage " +
                    std::to_string(RankOf(peer_virtual_stage));
}

Status StageLink::EndExchange() {
  if (!ordered() || exchange_.empty()) return Status::Ok();
  const auto t0 = Clock::now();
  std::unique_ptr<Work> work = p2p_->Exchange(exchange_);
  const std::string what = "pipeline stage " + std::to_string(stage()) + " " + exchange_what_;
  exchange_.clear(), exchange_what_.clear();
  // Later compute waits for the exchange on its stream, and later exchanges
  // follow it on theirs: its send buffers can be handed out again now.
  for (int b : exchange_sends_) free_.push_back(b);
  exchange_sends_.clear();
  Status st = placement_.order ? placement_.order->After(std::move(work), what)
                               : work->Wait().context(what);
  *exchange_clock_ += SecondsSince(t0);
  return st;
}

Status StageLink::RecvActivation(int64_t chunk, int64_t mb, int64_t rows) {
  return ReceiveHeld(kActivation, chunk, mb, rows);
}

const float *StageLink::activation_input(int64_t chunk, int64_t mb) const {
  const Held &h = held_[Key(chunk, mb)];
  return h.activation_in < 0 ? nullptr : pool_[size_t(h.activation_in)].data();
}

Status StageLink::KeepOutput(int64_t chunk, int64_t mb, const float *output, int64_t rows) {
  Held &h = held_[Key(chunk, mb)];
  if (h.output < 0) {
    Result<int> b = Acquire();
    if (!b.ok()) {
      Status failed = b.status();
      return failed.context("pipeline: a send posted earlier");
    }
    h.output = b.value();
  }
  h.output_rows = rows;
  const int64_t n = rows * chunks_[size_t(chunk)].out_width;
  placement_.step().CopyRange(output, n, pool_[size_t(h.output)].data());
  return Status::Ok();
}

Status StageLink::SendHeld(Kind kind, int64_t chunk, int64_t mb) {
  Held &h = held_[Key(chunk, mb)];
  const bool activation = kind == kActivation;
  int &buffer = activation ? h.output : h.gradient_out;
  if (buffer < 0)
    return InternalError(std::string("pipeline: ") +
                         (activation ? "send_activation" : "send_gradient") + " of micro-batch " +
                         std::to_string(mb) + " before its " +
                         (activation ? "forward" : "backward"));
  const ChunkShape &shape = chunks_[size_t(chunk)];
  const int64_t bytes =
      (activation ? h.output_rows * shape.out_width : h.gradient_rows * shape.in_width) *
      int64_t(sizeof(float));
  const int posted = buffer;
  buffer = -1;  // the pending send owns it now
  return Post(kind, virtual_stage(chunk) + (activation ? 1 : -1), mb, posted, bytes,
              activation ? &times_.send_output : &times_.send_grad);
}

Status StageLink::SendActivation(int64_t chunk, int64_t mb) {
  return SendHeld(kActivation, chunk, mb);
}

Status StageLink::RecvGradient(int64_t chunk, int64_t mb, int64_t rows) {
  return ReceiveHeld(kGradient, chunk, mb, rows);
}

float *StageLink::gradient_input(int64_t chunk, int64_t mb) {
  const Held &h = held_[Key(chunk, mb)];
  return h.gradient_in < 0 ? nullptr : pool_[size_t(h.gradient_in)].data();
}

Status StageLink::GradientOutput(int64_t chunk, int64_t mb, int64_t rows, float **out) {
  Held &h = held_[Key(chunk, mb)];
  if (h.gradient_out < 0) {
    Result<int> b = Acquire();
    if (!b.ok()) {
      Status failed = b.status();
      return failed.context("pipeline: a send posted earlier");
    }
    h.gradient_out = b.value();
  }
  h.gradient_rows = rows;
  *out = pool_[size_t(h.gradient_out)].data();
  return Status::Ok();
}

Status StageLink::SendGradient(int64_t chunk, int64_t mb) {
  return SendHeld(kGradient, chunk, mb);
}

void StageLink::Release(int64_t chunk, int64_t mb) {
  Held &h = held_[Key(chunk, mb)];
  Free(&h.activation_in);
  Free(&h.gradient_in);
}

Status StageLink::FinishSends() {
  DST_RETURN_IF_ERROR(EndExchange());  // none is open where the program marks each end
  return Reap(/*all=*/true);
}

Result<double> StageLink::SumOverStages(double value) {
  // In double: the loss and squared norms keep their precision across stages.
  return SumOverGroup(*pp_, value);
}

}  // namespace dst
