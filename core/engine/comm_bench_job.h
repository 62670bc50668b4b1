// `dstrain comm-bench` as a job: every rank of a launch joins (rendezvous,
// same-config check, process groups of the config's layout), measures one
// group's collectives with RunCommBench and leaves the job as an engine does.
#pragma once

#include <string>

#include "core/common/status.h"

namespace dst {

// `config_text`: a ds_config ("" = "{}": one data-parallel group of the whole
// launch); its layout gives the groups and dstrain.comm_timeout_seconds the
// timeout. `request_json`: {"group": "dp"|"tp"|"pp", "ops": "allreduce,..."
// or a list, "min_bytes", "max_bytes", "factor", "iters", "warmup"} ("" =
// defaults); unknown keys are errors. Returns CommBenchJson's report (the
// same on every rank: the slowest rank's times).
Result<std::string> RunCommBenchJob(const std::string &config_text,
                                    const std::string &request_json);

}  // namespace dst
