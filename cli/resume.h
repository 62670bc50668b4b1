// Resuming `dstrain train` from a checkpoint: the loaded step and the data
// position the CLI stored as client state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dstrain/dstrain.h"

namespace dstrain_cli {

// What a loaded checkpoint says about where training stopped.
struct ResumePoint {
  int64_t step = 0;                         // optimizer steps already taken
  std::optional<uint64_t> data_seed;        // client state "data_seed"
  std::optional<int64_t> next_batch_index;  // client state "next_batch_index"
};

// Loads DIR/TAG (empty tag: DIR/latest) into the engine; warns when the client
// state's batch index disagrees with the step count.
ResumePoint LoadCheckpoint(dst_engine_t *engine, const std::string &dir, const std::string &tag);

// Without a checkpoint: step 0, or the step dstrain.resume_from_swap took
// the engine back to.
ResumePoint StartingPoint(dst_engine_t *engine);

// `seed_flag` (--seed) if given, else the checkpoint's data seed, else
// `config_seed`. Warns when --seed changes the data order of a resumed run.
uint64_t ChooseDataSeed(std::optional<uint64_t> seed_flag, uint64_t config_seed,
                        const ResumePoint &resume);

}  // namespace dstrain_cli
