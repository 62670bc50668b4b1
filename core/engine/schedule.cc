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
    case Op::kRecvActivation:
      return "recv_activation";
    case Op::kSendActivation:
      return "send_activation";
    case Op::kRecvGradient:
      return "recv_gradient";
    case Op::kSendGradient:
      return "send_gradient";
    case Op::kReduceTiedGradients:
      return "reduce_tied_gradients";
    case Op::kBackwardInput:
      return "backward_input";
    case Op::kBackwardWeight:
      return "backward_weight";
  }
  return "?";
}

namespace {

bool IsBackward(Op op) {
  return op == Op::kBackward || op == Op::kBackwardInput || op == Op::kBackwardWeight;
}

std::string Where(size_t index, const Instruction &ins) {
  std::string s = "instruction " + std::to_string(index) + " (" + OpName(ins.op);
  if (ins.micro_batch >= 0) s += " of micro-batch " + std::to_string(ins.micro_batch);
  if (ins.chunk > 0) s += ", chunk " + std::to_string(ins.chunk);
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
  int64_t chunks = 1;
  for (const Instruction &ins : *program) {
    training |= IsBackward(ins.op);
    if (ins.op == Op::kForward || IsBackward(ins.op)) chunks = std::max(chunks, ins.chunk + 1);
  }
  // Per (chunk, micro-batch): key = chunk * micro_batches + micro_batch.
  const size_t keys = size_t(std::max<int64_t>(micro_batches, 0) * chunks);
  std::vector<int64_t> slot_of(keys, -1);
  std::vector<int> forwards(keys, 0), backwards(keys, 0), input_halves(keys, 0);
  std::vector<bool> used(keys, false);
  std::vector<bool> busy(size_t(std::max<int64_t>(slots, 0)), false);
  int64_t last_backward = -1;
  std::vector<int64_t> last_of_chunk(size_t(chunks), -1);
  for (size_t i = 0; i < program->size(); ++i) {
    Instruction &ins = (*program)[i];
    if (ins.op != Op::kForward && !IsBackward(ins.op)) continue;
    if (ins.micro_batch < 0 || ins.micro_batch >= micro_batches)
      return InternalError(Where(i, ins) + ": the batch has " + std::to_string(micro_batches) +
                           " micro-batches");
    if (ins.chunk < 0) return InternalError(Where(i, ins) + ": negative model chunk");
    const size_t key = size_t(ins.chunk * micro_batches + ins.micro_batch);
    used[key] = true;
    if (ins.op == Op::kForward) {
      if (forwards[key]++ > 0)
        return InternalError(Where(i, ins) + ": the micro-batch was already forwarded");
      auto free_slot = std::find(busy.begin(), busy.end(), false);
      if (free_slot == busy.end())
        return InternalError(Where(i, ins) + ": more than " + std::to_string(slots) +
                             " micro-batches would be in flight (the model has " +
                             std::to_string(slots) + " activation slots)");
      ins.slot = int64_t(free_slot - busy.begin());
      slot_of[key] = ins.slot;
      *free_slot = training;  // eval: the slot is free again at once
    } else if (ins.op == Op::kBackwardInput) {
      if (forwards[key] == 0)
        return InternalError(Where(i, ins) + ": backward before the micro-batch's forward");
      if (input_halves[key]++ > 0 || backwards[key] > 0)
        return InternalError(Where(i, ins) + ": the micro-batch was already run backward");
      ins.slot = slot_of[key];
    } else {
      if (forwards[key] == 0)
        return InternalError(Where(i, ins) + ": backward before the micro-batch's forward");
      if (ins.op == Op::kBackwardWeight && input_halves[key] == 0)
        return InternalError(Where(i, ins) + ": weight gradients before the input gradients");
      if (ins.op == Op::kBackward && input_halves[key] > 0)
        return InternalError(Where(i, ins) + ": a whole backward after its input half");
      if (backwards[key]++ > 0)
        return InternalError(Where(i, ins) + ": the micro-batch was already run backward");
      ins.slot = slot_of[key];
      busy[size_t(ins.slot)] = false;
      ins.last_backward = ins.last_of_chunk = false;
      last_backward = int64_t(i);
      last_of_chunk[size_t(ins.chunk)] = int64_t(i);
    }
  }
  for (int64_t c = 0; c < chunks; ++c) {
    bool chunk_used = false;
    for (int64_t mb = 0; mb < micro_batches; ++mb)
      chunk_used |= used[size_t(c * micro_batches + mb)];
    if (!chunk_used) continue;
    const std::string of_chunk = c > 0 ? " of chunk " + std::to_string(c) : "";
    for (int64_t mb = 0; mb < micro_batches; ++mb) {
      const size_t key = size_t(c * micro_batches + mb);
      if (forwards[key] == 0)
        return InternalError("the program never runs micro-batch " + std::to_string(mb) + of_chunk +
                             " forward");
      if (training && backwards[key] == 0)
        return InternalError("the program never runs micro-batch " + std::to_string(mb) + of_chunk +
                             " backward");
    }
  }
  if (last_backward >= 0) (*program)[size_t(last_backward)].last_backward = true;
  for (int64_t i : last_of_chunk)
    if (i >= 0) (*program)[size_t(i)].last_of_chunk = true;
  return Status::Ok();
}

int64_t PeakInFlight(const std::vector<Instruction> &program) {
  bool training = false;
  for (const Instruction &ins : program) training |= IsBackward(ins.op);
  int64_t in_flight = 0, peak = 0;
  for (const Instruction &ins : program) {
    if (ins.op == Op::kForward) peak = std::max(peak, ++in_flight);
    if (ins.op == Op::kForward && !training) --in_flight;
    if (ins.op == Op::kBackward || ins.op == Op::kBackwardWeight) --in_flight;
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

namespace {

Op InstructionOp(PipeOp op) {
  switch (op) {
    case PipeOp::kForward:
      return Op::kForward;
    case PipeOp::kBackward:
      return Op::kBackward;
    case PipeOp::kBackwardInput:
      return Op::kBackwardInput;
    case PipeOp::kBackwardWeight:
      return Op::kBackwardWeight;
    case PipeOp::kSendActivation:
      return Op::kSendActivation;
    case PipeOp::kRecvActivation:
      return Op::kRecvActivation;
    case PipeOp::kSendGradient:
      return Op::kSendGradient;
    case PipeOp::kRecvGradient:
      break;
  }
  return Op::kRecvGradient;
}

}  // namespace

std::vector<Instruction> PipelineProgram(const std::vector<PipeAction> &actions, ProgramKind kind) {
  std::vector<Instruction> program;
  if (kind != ProgramKind::kEval) program.push_back({Op::kZeroGradients});
  const std::vector<PipeAction> run =
      kind == ProgramKind::kEval ? ForwardActions(actions) : actions;
  const std::vector<bool> ends = ExchangeEnds(run);
  for (size_t k = 0; k < run.size(); ++k) {
    Instruction ins{InstructionOp(run[k].op), run[k].micro_batch};
    ins.chunk = run[k].chunk;
    ins.ends_exchange = ends[k];
    program.push_back(ins);
  }
  if (kind == ProgramKind::kEval) return program;
  program.push_back({Op::kReduceGradients});
  program.push_back({Op::kReduceTiedGradients});
  if (kind == ProgramKind::kForwardBackward) {
    program.push_back({Op::kGatherGradients});
    return program;
  }
  AppendStep(&program);
  return program;
}

}  // namespace dst
