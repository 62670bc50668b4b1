// What `dstrain estimate` prints and dst_estimate_memory_json returns,
// computed from a config and a model spec without building anything: the
// model state per rank at each ZeRO stage (the partition policy the engine
// uses), this layout's ranks in full (LayoutMemory: activations included,
// each pipeline rank's layers), and every layout of the world size
// (EnumerateLayouts) for a memory budget.
#pragma once

#include <cstdint>
#include <string>

#include "core/common/status.h"

namespace dst {

// The report as JSON text (the C ABI's dst_estimate_memory_json documents
// its fields); `total_steps` resolves "auto" in the LR schedule (0: unknown).
Result<std::string> MemoryReportJson(const std::string &config_text, const std::string &model_text,
                                     int64_t world_size, int64_t total_steps);

}  // namespace dst
