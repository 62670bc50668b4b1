// Resuming from the optimizer's swap files after a crash (dstrain.resume_from_swap):
// every commit of the NVMe tier carries a note, the engine's state after
// that step (step count, skipped steps, loss scaler). A restarted job opens
// the files a killed run left, every rank says which committed steps its
// file holds (the last and usually the one before), and the newest step all
// of them hold is taken back: optimizer state and master weights as
// committed, parameters rebuilt from the masters, progress and scaler from
// the note. DeepSpeed's swap files are overwritten in place and cannot do
// this; a checkpoint is the only way back there.
#pragma once

#include <chrono>
#include <string>

#include "core/comm/launch_env.h"
#include "core/comm/store.h"
#include "core/common/status.h"
#include "core/engine/executor.h"
#include "core/precision/loss_scaler.h"
#include "core/zero/parallelism.h"

namespace dst {

// The note committed with the step about to be taken (a step that is not skipped).
std::string CommitNoteAfterStep(const TrainingProgress &progress, const LossScaler &scaler);

// After DataParallelism::Start: resumes at the newest step every rank's
// swap file holds, or starts every rank afresh when one has none. `store`
// (null on one rank) carries each rank's steps. *resumed_step: the step
// taken back, or -1.
Status ResumeFromSwap(const LaunchEnv &env, Store *store, std::chrono::milliseconds timeout,
                      DataParallelism *dp, TrainingProgress *progress, LossScaler *scaler,
                      int64_t *resumed_step);

}  // namespace dst
