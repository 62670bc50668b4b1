// The rank grid: rank <-> (pp, dp, tp) coordinates, tensor parallelism
// fastest-varying (adjacent ranks share a TP group, as in Megatron-LM), then
// data parallelism, then pipeline stages.
#pragma once

#include <cstdint>
#include <vector>

namespace dst {

struct GridCoord {
  int64_t pp = 0, dp = 0, tp = 0;
};

class Topology {
 public:
  Topology(int64_t pp_size, int64_t dp_size, int64_t tp_size)
      : pp_(pp_size), dp_(dp_size), tp_(tp_size) {}

  int64_t world_size() const { return pp_ * dp_ * tp_; }
  int64_t pp_size() const { return pp_; }
  int64_t dp_size() const { return dp_; }
  int64_t tp_size() const { return tp_; }

  GridCoord CoordOf(int64_t rank) const {
    return {rank / (dp_ * tp_), (rank / tp_) % dp_, rank % tp_};
  }
  int64_t RankOf(const GridCoord &c) const { return (c.pp * dp_ + c.dp) * tp_ + c.tp; }

  // Global ranks of the data-parallel group of `rank` (same pp and tp), in dp order.
  std::vector<int64_t> DataParallelGroup(int64_t rank) const;
  // Global ranks of the tensor-parallel group of `rank` (same pp and dp).
  std::vector<int64_t> TensorParallelGroup(int64_t rank) const;
  // Global ranks of the pipeline of `rank` (same dp and tp), in stage order.
  std::vector<int64_t> PipelineGroup(int64_t rank) const;

 private:
  int64_t pp_, dp_, tp_;
};

}  // namespace dst
