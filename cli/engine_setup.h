// Creating the engine for `dstrain train` and reading what the loop needs
// from it: the engine info, the resolved config and the batch shape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dstrain/dstrain.h"
#include "handles.h"
#include "trainer.h"

namespace dstrain_cli {

// Creates the engine from the given files, or the built-in job for an empty
// path; `total_steps` resolves "auto" in the LR schedule. `metrics_port`
// turns on dstrain.monitor.http at that base port (0: any free port).
Engine CreateEngine(const std::string &config_path, const std::string &model_path,
                    int64_t total_steps, std::optional<int> metrics_port = std::nullopt);

dst_engine_info_t ReadEngineInfo(const dst_engine_t *engine);

// What the CLI reads from the engine's resolved ds_config.
struct ResolvedConfig {
  int64_t steps_per_print = 10;  // DeepSpeed's default
  uint64_t data_seed = 1234;     // "dstrain": {"seed": ...}
};

ResolvedConfig ReadResolvedConfig(const dst_engine_t *engine);

// n_samples = micro_batch_size * grad_accum_steps; seq_len = `requested_seq_len`
// (0: the model's n_ctx), a usage error when longer than n_ctx.
BatchShape ChooseBatchShape(const dst_engine_info_t &info, int64_t requested_seq_len);

}  // namespace dstrain_cli
