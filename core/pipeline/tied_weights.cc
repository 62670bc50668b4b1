#include "core/pipeline/tied_weights.h"

#include <string>

namespace dst {

namespace {
constexpr uint32_t kTiedTag = uint32_t(3) << 30;  // apart from StageLink's tags
}

TiedWeights::TiedWeights(Communicator *pp, int local_id, int64_t numel, int64_t peer,
                         MemoryTracker *tracker, MemoryResource *memory)
    : pp_(pp), id_(local_id), numel_(numel), peer_(peer), memory_(memory) {
  if (id_ < 0) return;
  mine_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(numel_), memory);
  theirs_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(numel_), memory);
  if (memory_ == nullptr) return;
  host_mine_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(numel_));
  host_theirs_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(numel_));
}

Status TiedWeights::SumGradients(DataParallelism &dp) {
  if (id_ < 0) return Status::Ok();
  DST_RETURN_IF_ERROR(dp.ReadStoredGradient(id_, mine_.data()));
  const int64_t bytes = numel_ * int64_t(sizeof(float));
  float *send_from = mine_.data(), *recv_into = theirs_.data();
  if (memory_ != nullptr) {
    memory_->Download(host_mine_.data(), mine_.data(), size_t(bytes));
    send_from = host_mine_.data(), recv_into = host_theirs_.data();
  }
  auto recv = pp_->Recv(recv_into, bytes, peer_, kTiedTag);
  auto send = pp_->Send(send_from, bytes, peer_, kTiedTag);
  Status st = send->Wait();
  Status got = recv->Wait();
  if (st.ok()) st = got;
  if (!st.ok())
    return st.context("summing the tied weight's gradients with pipeline stage " +
                      std::to_string(peer_));
  if (memory_ != nullptr) memory_->Upload(theirs_.data(), host_theirs_.data(), size_t(bytes));
  // a + b on one stage, b + a on the other: the same bits.
  return dp.AddStoredGradient(id_, theirs_.data());
}

}  // namespace dst
