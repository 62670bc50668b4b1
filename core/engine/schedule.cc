#include "core/engine/schedule.h"

namespace dst {

namespace {
std::vector<Instruction> MicroSteps(int64_t micro_batches, bool backward) {
  std::vector<Instruction> program;
  if (backward) program.push_back({Op::kZeroGradients});
  for (int64_t i = 0; i < micro_batches; ++i) {
    program.push_back({Op::kForward, i});
    if (backward) program.push_back({Op::kBackward, i});
  }
  if (backward) program.push_back({Op::kReduceGradients});
  return program;
}
}  // namespace

std::vector<Instruction> TrainSchedule(int64_t micro_batches) {
  std::vector<Instruction> program = MicroSteps(micro_batches, true);
  program.push_back({Op::kClipGradients});
  program.push_back({Op::kOptimizerStep});
  return program;
}

std::vector<Instruction> ForwardBackwardSchedule(int64_t micro_batches) {
  return MicroSteps(micro_batches, true);
}

std::vector<Instruction> EvalSchedule(int64_t micro_batches) {
  return MicroSteps(micro_batches, false);
}

}  // namespace dst
