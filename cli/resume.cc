#include "resume.h"

#include <nlohmann/json.hpp>

#include "cli_error.h"

namespace dstrain_cli {
namespace {

void ReadClientState(const char *client_state, ResumePoint &resume) {
  const nlohmann::json state =
      nlohmann::json::parse(client_state != nullptr ? client_state : "null", nullptr, false);
  if (!state.is_object()) return;
  const auto seed = state.find("data_seed");
  if (seed != state.end() && seed->is_number_unsigned()) resume.data_seed = seed->get<uint64_t>();
  const auto index = state.find("next_batch_index");
  if (index != state.end() && index->is_number_integer()) {
    resume.next_batch_index = index->get<int64_t>();
  }
}

void WarnOnBatchIndexMismatch(const ResumePoint &resume) {
  if (resume.next_batch_index && *resume.next_batch_index != resume.step) {
    Warn("the checkpoint is at step " + std::to_string(resume.step) +
         " but its client state says next_batch_index " + std::to_string(*resume.next_batch_index) +
         "; continuing with batch index = step");
  }
}

}  // namespace

ResumePoint LoadCheckpoint(dst_engine_t *engine, const std::string &dir, const std::string &tag) {
  const char *client_state = nullptr;
  Check(dst_engine_load_checkpoint(engine, dir.c_str(), tag.empty() ? nullptr : tag.c_str(),
                                   &client_state),
        "loading the checkpoint from '" + dir + "'");
  ResumePoint resume;
  ReadClientState(client_state, resume);
  Check(dst_engine_step_count(engine, &resume.step), "reading the step count");
  WarnOnBatchIndexMismatch(resume);
  return resume;
}

ResumePoint StartingPoint(dst_engine_t *engine) {
  ResumePoint start;
  Check(dst_engine_step_count(engine, &start.step), "reading the step count");
  return start;
}

uint64_t ChooseDataSeed(std::optional<uint64_t> seed_flag, uint64_t config_seed,
                        const ResumePoint &resume) {
  if (!seed_flag) return resume.data_seed.value_or(config_seed);
  if (resume.data_seed && *resume.data_seed != *seed_flag) {
    Warn("--seed " + std::to_string(*seed_flag) + " differs from the checkpoint's data seed " +
         std::to_string(*resume.data_seed) + "; the run will not see the data it would have seen");
  }
  return *seed_flag;
}

}  // namespace dstrain_cli
