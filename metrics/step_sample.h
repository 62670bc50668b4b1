// What the engine pushes into the metrics registry after every optimizer
// step: plain numbers, no engine types, so metrics/ depends on nothing in
// core/ but the config and the engine depends on metrics/ only through this
// struct and MetricsRegistry (registry.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dst::metrics {

// Communication op types, in the order of dst::CommOp.
inline constexpr std::array<const char *, 8> kCommOpNames = {
    "allreduce", "reduce", "reduce_scatter", "allgather", "broadcast", "barrier", "send", "recv"};

// Memory categories, in the order of dst::MemoryCategory.
inline constexpr std::array<const char *, 6> kMemoryCategoryNames = {
    "parameters", "gradients", "optimizer_state", "activations", "communication", "offload"};

// The process groups of the per-group communication series (CommGroup order).
inline constexpr std::array<const char *, 3> kCommGroupNames = {"dp", "tp", "pp"};

struct CommOpSample {
  int64_t count = 0;         // operations since the engine started (counter)
  int64_t bytes = 0;         // payload bytes since the engine started (counter)
  double seconds = 0;        // time in the op since the engine started (counter)
  double bus_bandwidth = 0;  // bytes/s by the nccl-tests definition, over the last step's ops
};

struct MemorySample {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};

// Identity of the rank that produced the sample: become the labels.
struct RankIdentity {
  std::string job = "dstrain";
  int64_t rank = 0, local_rank = 0, world_size = 1;
  int64_t dp_rank = 0, tp_rank = 0, pp_rank = 0;
  // ZeRO-Offload's device per tier ("none", "cpu", "nvme"); on the CPU
  // engine "cpu" moves nothing (the state is in host memory already).
  std::string offload_optimizer = "none", offload_param = "none";
  std::string offload_io_engine;  // the NVMe tier's ("io_uring", "pread/pwrite"); "" without
};

// One action of a pipeline stage's last step: what ran when (seconds from
// the step's start), so a user sees the bubble.
struct TimelineEvent {
  const char *op = "";  // "forward", "backward", "recv_activation", ... (static strings)
  int64_t micro_batch = -1, chunk = 0;
  double start = 0, end = 0;
};

struct StepSample {
  int64_t step = 0;                 // optimizer steps taken so far (after this one)
  int64_t samples_total = 0;        // samples this rank has trained on
  int64_t tokens_total = 0;         // tokens this rank has trained on (GPT; 0 otherwise)
  double loss = 0;                  // the step's mean loss (group average)
  double lr = 0;                    // learning rate used by this step
  double grad_norm = 0;             // global gradient norm before clipping
  double loss_scale = 1;            // fp16 dynamic loss scale (1 without fp16)
  int64_t skipped_steps_total = 0;  // steps skipped on overflow
  double step_seconds = 0;          // wall clock of the whole step
  double tokens_per_second = 0;     // this rank's tokens (or samples) / step_seconds
  double samples_per_second = 0;
  double mfu = 0;  // achieved FLOP/s / peak FLOP/s (0 when the peak is unknown)
  double achieved_flops_per_second = 0;
  // Wall-clock breakdown of this step with DeepSpeed's timer names:
  // "forward", "backward", "backward_inner", "backward_allreduce" (stage 0/1) or
  // "backward_reduce_scatter" (2/3), "step", and the per-micro-step means
  // "forward_microstep", "backward_microstep", "backward_inner_microstep",
  // "backward_allreduce_microstep", "step_microstep".
  std::vector<std::pair<std::string, double>> timers;
  std::array<CommOpSample, kCommOpNames.size()> comm{};  // over every group
  // [group][op]: the same per process group (kCommGroupNames); bus bandwidth
  // by the group's own size.
  std::array<std::array<CommOpSample, kCommOpNames.size()>, kCommGroupNames.size()> comm_by_group{};
  std::array<MemorySample, kMemoryCategoryNames.size()> memory{};
  MemorySample device_memory{};  // of those, the bytes in the device's memory (0 on the CPU)
  int64_t process_rss_bytes = 0;
  // The optimizer's NVMe tier (zeros without it): bytes moved and time the
  // step waited for its I/O, running totals.
  int64_t offload_read_bytes_total = 0, offload_write_bytes_total = 0;
  double offload_io_wait_seconds_total = 0;
  // gradient_compression (zeros without it): the bytes this rank's encodings
  // took and the fp32 bytes of the buckets they encoded, running totals.
  int64_t compression_payload_bytes_total = 0, compression_dense_bytes_total = 0;
  // communication.slow_node_tolerance: the layers' compute time of the step,
  // and the last check's verdict on this rank (slower_by: over the median).
  double compute_seconds = 0;
  bool straggler = false;
  double straggler_slower_by = 0;
  double unix_time = 0;  // seconds since the epoch when the step ended
  // Pipeline stages: the step's actions in order (empty otherwise). Served by
  // /api/v1/snapshot with the latest sample only, not kept in the history.
  std::vector<TimelineEvent> timeline;
};

}  // namespace dst::metrics
