// A step as an instruction stream. Every layout runs the same executor; a
// single-stage, single-rank step is the simplest stream. Pipeline and ZeRO
// schedules add instructions (send/recv activations, reduce-scatter, gather)
// without changing how the engine runs them.
#pragma once

#include <cstdint>
#include <vector>

namespace dst {

enum class Op {
  kZeroGradients,    // clear the gradient buffer
  kForward,          // forward of micro-batch `micro_batch`
  kBackward,         // backward of the same micro-batch (activations are single-buffered)
  kReduceGradients,  // data-parallel reduction (no-op on one rank)
  kClipGradients,    // global-norm clipping
  kOptimizerStep,    // update, then advance the LR schedule
};

struct Instruction {
  Op op;
  int64_t micro_batch = 0;
};

// forward/backward per micro-batch, then reduce, clip, step.
std::vector<Instruction> TrainSchedule(int64_t micro_batches);
// forward/backward per micro-batch, then reduce (gradients left for reading).
std::vector<Instruction> ForwardBackwardSchedule(int64_t micro_batches);
// forward per micro-batch.
std::vector<Instruction> EvalSchedule(int64_t micro_batches);

}  // namespace dst
