// The tensor-parallel group's collectives as the layers call them: on the
// layers' element type (the group runs fp32; a double model is never split),
// and nothing to do on a group of one.
#pragma once

#include <memory>
#include <type_traits>

#include "core/comm/communicator.h"
#include "core/tensor_parallel/tp_group.h"

namespace dst {

namespace tp_detail {
// launch(data) on a group of more than one rank (null: nothing to do on a
// group of one); a double model is never split.
template <typename T, typename Launch>
std::unique_ptr<Work> OnGroup(const TensorParallelGroup &tp, T *data, Launch launch) {
  if (tp.size == 1) return nullptr;
  if constexpr (std::is_same_v<T, float>)
    return launch(data);
  else
    return std::make_unique<DoneWork>(InternalError("tensor parallelism on a double model"));
}
}  // namespace tp_detail

// In-place sum over the group; null when there is no group to sum over.
template <typename T>
std::unique_ptr<Work> TpAllReduce(const TensorParallelGroup &tp, T *data, int64_t count) {
  return tp_detail::OnGroup(tp, data, [&](auto *d) { return tp.comm->AllReduceSum(d, count); });
}

// data[rank * shard, (rank + 1) * shard) to every rank.
template <typename T>
std::unique_ptr<Work> TpAllGather(const TensorParallelGroup &tp, T *data, int64_t shard) {
  return tp_detail::OnGroup(tp, data, [&](auto *d) { return tp.comm->AllGather(d, shard); });
}

// data[0, size * shard) summed over the group; afterwards this rank's shard
// data[rank * shard, (rank + 1) * shard) holds its part of the sum.
template <typename T>
std::unique_ptr<Work> TpReduceScatter(const TensorParallelGroup &tp, T *data, int64_t shard) {
  return tp_detail::OnGroup(tp, data, [&](auto *d) { return tp.comm->ReduceScatterSum(d, shard); });
}

// The kernels queued after this call see `work`'s result (null: nothing to
// wait for): the host waits, or with the group's WorkOrder the device's
// compute stream does. The error names `what`.
inline Status TpWait(const TensorParallelGroup &tp, std::unique_ptr<Work> work, const char *what) {
  if (!work) return Status::Ok();
  const std::string where = std::string("tensor-parallel ") + what;
  if (tp.order != nullptr) return tp.order->After(std::move(work), where);
  Status st = work->Wait();
  return st.ok() ? st : st.context(where);
}

}  // namespace dst
