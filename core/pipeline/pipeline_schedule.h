// Pipeline schedules as data: for each of the p stages, the list of actions
// it runs in one optimizer step over m micro-batches — forward, backward
// (or, for zero-bubble schedules, its two halves: the input gradient on the
// critical path and the weight gradient deferred into the bubble), and the
// sends and receives of activations and gradients between neighbours. A
// checker simulates every stage's list before anything runs: sends and
// receives pair up in order, no stage can wait forever, every micro-batch's
// forward precedes its backward, and the peak number of micro-batches each
// stage holds activations for is computed (what the stage's activation store
// must hold). A schedule that fails the check is an error, not a hang.
//
// The executor (core/engine) runs one stage's list; turning actions into its
// instructions is the pipeline engine's job (the pipeline issue).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/status.h"

namespace dst {

enum class PipeOp {
  kForward,         // run the stage's layers forward on micro-batch i
  kBackward,        // input and weight gradients of micro-batch i
  kBackwardInput,   // zero-bubble: the input gradient only (critical path)
  kBackwardWeight,  // zero-bubble: the weight gradient (deferred)
  kSendActivation,  // to the next stage
  kRecvActivation,  // from the previous stage
  kSendGradient,    // to the previous stage
  kRecvGradient,    // from the next stage
};

// "forward", "backward", "backward_input", "backward_weight", "send_activation", ...
const char *PipeOpName(PipeOp op);

struct PipeAction {
  PipeOp op;
  int64_t micro_batch = 0;
  // Interleaved schedules: which of the rank's v model chunks (chunk c on
  // rank r is virtual stage c * p + r, as in Megatron). 0 otherwise.
  int64_t chunk = 0;
};

enum class PipeScheduleKind {
  kGPipe,                  // all forwards, then all backwards
  kOneForwardOneBackward,  // DeepSpeed's TrainSchedule / Megatron's non-interleaved 1F1B
  kZeroBubbleH1,           // 1F1B with the backward split, weight gradients deferred (ZB-H1)
  kInterleaved1F1B,        // Megatron's interleaved 1F1B over v model chunks per rank
};

// An evaluation step's share of a stage's actions: the forwards and the
// sends and receives of their activations, in order.
std::vector<PipeAction> ForwardActions(const std::vector<PipeAction> &actions);

// "gpipe", "1f1b", "zb-h1", "interleaved".
const char *PipeScheduleName(PipeScheduleKind kind);
// Parses a schedule name (the config's spelling); errors list the choices.
Result<PipeScheduleKind> ParsePipeSchedule(const std::string &name);

// programs[r]: rank r's actions for m micro-batches on p ranks, each rank
// holding `virtual_stages` model chunks (interleaved only; 1 otherwise).
// Interleaved 1F1B takes the micro-batches in rounds as PyTorch does (rounds
// = max(1, m / p), each of m / rounds micro-batches; with v > 1, m must
// divide into them: the checker refuses a schedule that does not), so m
// need not be a multiple of p.
std::vector<std::vector<PipeAction>> BuildPipeSchedule(PipeScheduleKind kind, int64_t stages,
                                                       int64_t micro_batches,
                                                       int64_t virtual_stages = 1);

struct PipeScheduleCheck {
  // Per stage: the most micro-batches whose activations it holds at once
  // (from a forward until the last backward half that reads them).
  std::vector<int64_t> peak_in_flight;
  // Simulated time (each compute action one unit, communication free, a
  // receive waiting for its send): the step's length in units, and per stage
  // the units it does not compute (its bubble), to compare schedules before
  // running them.
  int64_t makespan = 0;
  std::vector<int64_t> idle;
};

// Simulates `programs` (virtual stage s sends activations to s + 1 and
// gradients to s - 1; sends never block, a receive waits for its send): an error names
// the stage, the action and what it waits for if any stage could wait
// forever, and the first action that breaks the rules (a backward before
// its forward, an action twice, a micro-batch left out, a send with nothing
// to send).
// `virtual_stages` v: each rank's programs run chunks 0..v-1 (virtual stage
// c * p + r sends activations to virtual stage c * p + r + 1).
Result<PipeScheduleCheck> CheckPipeSchedule(const std::vector<std::vector<PipeAction>> &programs,
                                            int64_t micro_batches, int64_t virtual_stages = 1);

}  // namespace dst
