// The lines `dstrain train` prints when it ends.
#pragma once

#include "training_loop.h"

namespace dstrain_cli {

// Steps, time, mean tokens/s, first and last validation loss, the final loss
// line (identical for a resumed and an uninterrupted run) and the checkpoint.
void PrintSummary(const LoopResult &result);

// To stderr: where an interrupted run stopped and what was saved.
void PrintInterrupted(const LoopResult &result);

}  // namespace dstrain_cli
