// Exchanges: a pipeline schedule's sends and receives over a stream-ordered
// transport (NCCL on GPUs). There each rank's point-to-point operations run
// one after another on one stream, a send completes only when its peer's
// receive runs (and the other way round), and a send is matched to a receive
// by order alone per (sender, receiver) — tags do not exist. A receive
// posted ahead, or two stages each sending to the other first, would hang.
//
// The rule we run by (Megatron's send_forward_recv_backward, torch's
// batch_isend_irecv): each maximal run of consecutive sends and receives in
// a stage's program is one exchange, posted as one group whose operations
// wait for none of each other; a rank's exchanges run in program order.
// CheckExchanges simulates every rank under that rule before anything runs:
// an exchange completes when every operation in it has met its partner in
// the peer's posted exchanges; a rank that cannot go on names what it waits
// for, and a send whose order-matched receive expects another message (a
// different kind, virtual stage or micro-batch) is an error — over a
// tag-free transport it would land in the wrong buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/status.h"
#include "core/pipeline/pipeline_schedule.h"

namespace dst {

bool IsExchangeAction(PipeOp op);

// Per action of a stage's program: true for a send or receive that ends its
// exchange (the next action is compute, or there is none).
std::vector<bool> ExchangeEnds(const std::vector<PipeAction> &actions);

// `programs[r]`: rank r's actions (virtual stage c * p + r runs chunk c).
// Assumes CheckPipeSchedule accepted them (each send has its receive).
Status CheckExchanges(const std::vector<std::vector<PipeAction>> &programs,
                      int64_t virtual_stages = 1);

// The programs regrouped so that CheckExchanges accepts them. A send alone
// in its exchange waits for its peer's receive; when that receive sits
// behind the peer's own blocked exchange (zero-bubble's deferred weight
// gradients, interleaving's chunk changes put computation between a send
// and the next receive), the schedule would hang. Each such receive — with
// the receives from the same peer before it, so the order per peer holds —
// moves up into the peer's blocked exchange, and the simulation runs again.
// Receives only move earlier (none is read before its place in the program)
// and sends never move, so what each computation reads is unchanged; the
// programs that need no move come back as they were. An error when a hang
// cannot be undone so, or messages cross.
Result<std::vector<std::vector<PipeAction>>> GroupForStreamOrder(
    std::vector<std::vector<PipeAction>> programs, int64_t virtual_stages = 1);

}  // namespace dst
