// A step as a program: a list of instructions the executor runs in order,
// inferring nothing. Each forward and backward names its micro-batch and the
// activation slot that micro-batch's saved values occupy; the step's last
// backward is marked (reductions may overlap it); gathering gradients and
// recording the step are instructions of their own. The plain schedules are
// built here; a pipeline schedule (1F1B, interleaved, zero-bubble) is another
// list of the same instructions, checked by the same PrepareProgram.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/pipeline/exchange_order.h"
#include "core/pipeline/pipeline_schedule.h"

namespace dst {

enum class Op {
  kZeroGradients,    // clear the gradients; nothing in flight
  kForward,          // forward of `micro_batch` into activation slot `slot`
  kBackward,         // backward of `micro_batch` from its slot
  kReduceGradients,  // finish the data-parallel reduction (no-op on one rank)
  kGatherGradients,  // make the full gradients readable (forward_backward without a step)
  kClipGradients,    // global norm, overflow check, clipping
  kOptimizerStep,    // update, then advance the LR schedule and the step counter
  kRecordStep,       // the step's figures into the metrics
  // Pipeline parallelism (each names its micro-batch and model chunk):
  kRecvActivation,       // the chunk's input from the previous stage (waits for it)
  kSendActivation,       // the chunk's output to the next stage (posted; waited for at the end)
  kRecvGradient,         // the gradient of the chunk's output from the next stage
  kSendGradient,         // the gradient of the chunk's input to the previous stage
  kReduceTiedGradients,  // sum the tied weights' gradients over the stages holding copies
  // Zero-bubble schedules: the backward in two halves, each naming its
  // micro-batch, chunk and slot (held until the weight half).
  kBackwardInput,   // the input gradients (what the previous stage waits for)
  kBackwardWeight,  // the parameter gradients, later
};

// "zero_gradients", "forward", "backward", ...
const char *OpName(Op op);

struct Instruction {
  Op op;
  int64_t micro_batch = -1;    // kForward, kBackward and the pipeline's sends and receives
  int64_t slot = -1;           // kForward, kBackward: set by PrepareProgram
  bool last_backward = false;  // kBackward / kBackwardWeight: the step's last (PrepareProgram)
  bool last_of_chunk = false;  // kBackward / kBackwardWeight: its chunk's last (PrepareProgram)
  int64_t chunk = 0;           // pipeline: the rank's model chunk (interleaved schedules)
  // Pipeline sends and receives: the last of its exchange (a run of them
  // between two computations, posted as one group on a device).
  bool ends_exchange = false;
};

// Checks a program over `micro_batches` micro-batches and fills in what the
// executor reads: each forward/backward's activation slot (one per (chunk,
// micro-batch) in flight; at most `slots`) and the last backward. A training
// program must forward each micro-batch of each chunk it names once and
// backward it once, after its forward — whole, or as an input half then a
// weight half (the slot is freed after the weight half); an eval program (no backward) frees
// each slot after its forward. Errors name the instruction and what is wrong
// (a schedule that fails is an error, not a hang or a corrupted activation).
Status PrepareProgram(std::vector<Instruction> *program, int64_t micro_batches, int64_t slots);
// The most micro-batches a program holds in flight at once.
int64_t PeakInFlight(const std::vector<Instruction> &program);

// zero, (forward i, backward i) x m, reduce, clip, step, record.
std::vector<Instruction> TrainSchedule(int64_t micro_batches);
// zero, (forward i, backward i) x m, reduce, gather (gradients left for reading).
std::vector<Instruction> ForwardBackwardSchedule(int64_t micro_batches);
// forward per micro-batch.
std::vector<Instruction> EvalSchedule(int64_t micro_batches);
// 1F1B on one rank, as the first of `stages` pipeline stages runs it:
// min(stages - 1, m) forwards first, then one forward and one backward
// alternately, then the remaining backwards; reduce, clip, step, record.
std::vector<Instruction> OneForwardOneBackwardSchedule(int64_t micro_batches, int64_t stages);

// What a pipeline program is for.
enum class ProgramKind { kTrain, kForwardBackward, kEval };
// One pipeline stage's program from its actions (core/pipeline's schedules):
// zero, the actions as instructions, then per kind: train = wait for the
// reductions, sum tied gradients, clip, step, record; forward_backward = the
// same up to the tied sum, then gather; eval = the forward actions only.
std::vector<Instruction> PipelineProgram(const std::vector<PipeAction> &actions, ProgramKind kind);

}  // namespace dst
