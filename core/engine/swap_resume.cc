#include "core/engine/swap_resume.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace dst {

namespace {

using Json = nlohmann::json;

constexpr const char *kStepsKey = "__dstrain/resume_from_swap/";

std::string Join(const std::vector<int64_t> &steps) {
  std::string text;
  for (int64_t s : steps) {
    if (!text.empty()) text += ',';
    text += std::to_string(s);
  }
  return text;
}

std::vector<int64_t> Split(const std::vector<uint8_t> &bytes) {
  std::vector<int64_t> steps;
  std::stringstream in(std::string(bytes.begin(), bytes.end()));
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) steps.push_back(std::stoll(item));
  return steps;
}

// Every rank's resumable steps, by rank.
Result<std::vector<std::vector<int64_t>>> ExchangeSteps(const LaunchEnv &env, Store *store,
                                                        std::chrono::milliseconds timeout,
                                                        const std::vector<int64_t> &mine) {
  if (!store || env.world_size == 1) return std::vector<std::vector<int64_t>>{mine};
  const std::string text = Join(mine);
  DST_RETURN_IF_ERROR(store->Set(kStepsKey + std::to_string(env.rank),
                                 std::vector<uint8_t>(text.begin(), text.end())));
  std::vector<std::vector<int64_t>> all;
  for (int64_t r = 0; r < env.world_size; ++r) {
    Result<std::vector<uint8_t>> got = store->Get(kStepsKey + std::to_string(r), timeout);
    if (!got.ok()) {
      Status st = got.status();
      return st.context("agreeing on the step to resume at (dstrain.resume_from_swap)");
    }
    all.push_back(Split(got.value()));
  }
  return all;
}

// The newest step every rank holds, or -1.
int64_t CommonStep(const std::vector<std::vector<int64_t>> &all) {
  for (int64_t step : all.front()) {
    bool everywhere = true;
    for (const std::vector<int64_t> &steps : all)
      everywhere = everywhere && std::find(steps.begin(), steps.end(), step) != steps.end();
    if (everywhere) return step;
  }
  return -1;
}

Status ApplyNote(const std::string &note, int64_t step, TrainingProgress *progress,
                 LossScaler *scaler) {
  const Json j = Json::parse(note, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("steps") || !j.contains("skipped_steps"))
    return IoError("the optimizer swap file's note at step " + std::to_string(step) +
                   " is unreadable; resume from a checkpoint instead");
  progress->steps = j["steps"].get<int64_t>();
  progress->skipped_steps = j["skipped_steps"].get<int64_t>();
  if (progress->steps - progress->skipped_steps != step)
    return IoError("the optimizer swap file's note says " + std::to_string(progress->steps) +
                   " steps, " + std::to_string(progress->skipped_steps) +
                   " skipped, but its state is that of optimizer step " + std::to_string(step) +
                   "; resume from a checkpoint instead");
  if (scaler->enabled() && j.contains("loss_scaler") && !j["loss_scaler"].is_null())
    DST_RETURN_IF_ERROR(scaler->FromJson(j["loss_scaler"]));
  return Status::Ok();
}

}  // namespace

std::string CommitNoteAfterStep(const TrainingProgress &progress, const LossScaler &scaler) {
  LossScaler after = scaler;
  (void)after.Update(/*overflow=*/false);
  return Json{{"steps", progress.steps + 1},
              {"skipped_steps", progress.skipped_steps},
              {"loss_scaler", after.enabled() ? after.ToJson() : Json()}}
      .dump();
}

Status ResumeFromSwap(const LaunchEnv &env, Store *store, std::chrono::milliseconds timeout,
                      DataParallelism *dp, TrainingProgress *progress, LossScaler *scaler,
                      int64_t *resumed_step) {
  *resumed_step = -1;
  const std::vector<int64_t> mine = dp->ResumableSteps();
  Result<std::vector<std::vector<int64_t>>> all = ExchangeSteps(env, store, timeout, mine);
  if (!all.ok()) return all.status();
  const int64_t step = CommonStep(all.value());
  if (step < 0) return mine.empty() ? Status::Ok() : dp->StartFresh();
  Result<std::string> note = dp->ResumeAt(step);
  if (!note.ok()) {
    Status st = note.status();
    return st.context("resuming at optimizer step " + std::to_string(step) +
                      " from the swap files (dstrain.resume_from_swap)");
  }
  DST_RETURN_IF_ERROR(ApplyNote(note.value(), step, progress, scaler));
  *resumed_step = step;
  return Status::Ok();
}

}  // namespace dst
