#include "core/pipeline/tied_weights.h"

#include <string>

namespace dst {

namespace {
constexpr uint32_t kTiedTag = uint32_t(3) << 30;  // apart from StageLink's tags
}

TiedWeights::TiedWeights(Communicator *pp, int local_id, int64_t numel, int64_t peer,
                         MemoryTracker *tracker, MemoryResource *memory)
    : pp_(pp), id_(local_id), numel_(numel), peer_(peer) {
  if (id_ < 0) return;
  mine_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(numel_), memory);
  theirs_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(numel_), memory);
}

Status TiedWeights::SumGradients(DataParallelism &dp) {
  if (id_ < 0) return Status::Ok();
  DST_RETURN_IF_ERROR(dp.ReadStoredGradient(id_, mine_.data()));
  const int64_t bytes = numel_ * int64_t(sizeof(float));
  Status st = pp_->Exchange({{false, theirs_.data(), bytes, peer_, kTiedTag},
                             {true, mine_.data(), bytes, peer_, kTiedTag}})
                  ->Wait();
  if (!st.ok())
    return st.context("summing the tied weight's gradients with pipeline stage " +
                      std::to_string(peer_));
  // a + b on one stage, b + a on the other: the same bits.
  return dp.AddStoredGradient(id_, theirs_.data());
}

}  // namespace dst
