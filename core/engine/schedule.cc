#include "core/engine/schedule.h"

#include <algorithm>

namespace dst {

const char *OpName(Op op) {
  switch (op) {
    case Op::kZeroGradients:
      return "zero_gradients";
    case Op::kForward:
      return "forward";
    case Op::kBackward:
      return "backward";
    case Op::kReduceGradients:
      return "reduce_gradients";
    case Op::kGatherGradients:
      return "gather_gradients";
    case Op::kClipGradients:
      return "clip_gradients";
    case Op::kOptimizerStep:
      return "optimizer_step";
    case Op::kRecordStep:
      return "record_step";
  }
  return "?";
}

namespace {

std::string Where(size_t index, const Instruction &ins) {
  std::string s = "instruction " + std::to_string(index) + " (" + OpName(ins.op);
  if (ins.micro_batch >= 0) s += " of micro-batch " + std::to_string(ins.micro_batch);
  return s + ")";
}

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

void AppendStep(std::vector<Instruction> *program) {
  program->push_back({Op::kClipGradients});
  program->push_back({Op::kOptimizerStep});
  program->push_back({Op::kRecordStep});
}

}  // namespace

Status PrepareProgram(std::vector<Instruction> *program, int64_t micro_batches, int64_t slots) {
  bool training = false;
  for (const Instruction &ins : *program) training |= ins.op == Op::kBackward;
  std::vector<int64_t> slot_of(size_t(std::max<int64_t>(micro_batches, 0)), -1);
  std::vector<int> forwards(slot_of.size(), 0), backwards(slot_of.size(), 0);
  std::vector<bool> busy(size_t(std::max<int64_t>(slots, 0)), false);
  int64_t last_backward = -1;
  for (size_t i = 0; i < program->size(); ++i) {
    Instruction &ins = (*program)[i];
    if (ins.op != Op::kForward && ins.op != Op::kBackward) continue;
    if (ins.micro_batch < 0 || ins.micro_batch >= micro_batches)
      return InternalError(Where(i, ins) + ": the batch has " + std::to_string(micro_batches) +
                           " micro-batches");
    const size_t mb = size_t(ins.micro_batch);
    if (ins.op == Op::kForward) {
      if (forwards[mb]++ > 0)
        return InternalError(Where(i, ins) + ": the micro-batch was already forwarded");
      auto free_slot = std::find(busy.begin(), busy.end(), false);
      if (free_slot == busy.end())
        return InternalError(Where(i, ins) + ": more than " + std::to_string(slots) +
                             " micro-batches would be in flight (the model has " +
                             std::to_string(slots) + " activation slots)");
      ins.slot = int64_t(free_slot - busy.begin());
      slot_of[mb] = ins.slot;
      *free_slot = training;  // eval: the slot is free again at once
    } else {
      if (forwards[mb] == 0)
        return InternalError(Where(i, ins) + ": backward before the micro-batch's forward");
      if (backwards[mb]++ > 0)
        return InternalError(Where(i, ins) + ": the micro-batch was already run backward");
      ins.slot = slot_of[mb];
      busy[size_t(ins.slot)] = false;
      ins.last_backward = false;
      last_backward = int64_t(i);
    }
  }
  for (size_t mb = 0; mb < forwards.size(); ++mb) {
    if (forwards[mb] == 0)
      return InternalError("the program never runs micro-batch " + std::to_string(mb) + " forward");
    if (training && backwards[mb] == 0)
      return InternalError("the program never runs micro-batch " + std::to_string(mb) +
                           " backward");
  }
  if (last_backward >= 0) (*program)[size_t(last_backward)].last_backward = true;
  return Status::Ok();
}

int64_t PeakInFlight(const std::vector<Instruction> &program) {
  bool training = false;
  for (const Instruction &ins : program) training |= ins.op == Op::kBackward;
  int64_t in_flight = 0, peak = 0;
  for (const Instruction &ins : program) {
    if (ins.op == Op::kForward) peak = std::max(peak, ++in_flight);
    if (ins.op == Op::kForward && !training) --in_flight;
    if (ins.op == Op::kBackward) --in_flight;
  }
  return peak;
}

std::vector<Instruction> TrainSchedule(int64_t micro_batches) {
  std::vector<Instruction> program = MicroSteps(micro_batches, true);
  AppendStep(&program);
  return program;
}

std::vector<Instruction> ForwardBackwardSchedule(int64_t micro_batches) {
  std::vector<Instruction> program = MicroSteps(micro_batches, true);
  program.push_back({Op::kGatherGradients});
  return program;
}

std::vector<Instruction> EvalSchedule(int64_t micro_batches) {
  return MicroSteps(micro_batches, false);
}

std::vector<Instruction> OneForwardOneBackwardSchedule(int64_t micro_batches, int64_t stages) {
  std::vector<Instruction> program = {{Op::kZeroGradients}};
  const int64_t warmup = std::min(std::max<int64_t>(stages - 1, 0), micro_batches);
  int64_t next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) program.push_back({Op::kForward, next_forward});
  while (next_forward < micro_batches) {
    program.push_back({Op::kForward, next_forward++});
    program.push_back({Op::kBackward, next_backward++});
  }
  while (next_backward < micro_batches) program.push_back({Op::kBackward, next_backward++});
  program.push_back({Op::kReduceGradients});
  AppendStep(&program);
  return program;
}

}  // namespace dst
