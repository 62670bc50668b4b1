#include "core/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <deque>

namespace dst {

const char *PipeOpName(PipeOp op) {
  switch (op) {
    case PipeOp::kForward:
      return "forward";
    case PipeOp::kBackward:
      return "backward";
    case PipeOp::kBackwardInput:
      return "backward_input";
    case PipeOp::kBackwardWeight:
      return "backward_weight";
    case PipeOp::kSendActivation:
      return "send_activation";
    case PipeOp::kRecvActivation:
      return "recv_activation";
    case PipeOp::kSendGradient:
      return "send_gradient";
    case PipeOp::kRecvGradient:
      return "recv_gradient";
  }
  return "?";
}

const char *PipeScheduleName(PipeScheduleKind kind) {
  switch (kind) {
    case PipeScheduleKind::kGPipe:
      return "gpipe";
    case PipeScheduleKind::kOneForwardOneBackward:
      return "1f1b";
    case PipeScheduleKind::kZeroBubbleH1:
      return "zb-h1";
    case PipeScheduleKind::kInterleaved1F1B:
      return "interleaved";
  }
  return "?";
}

Result<PipeScheduleKind> ParsePipeSchedule(const std::string &name) {
  for (PipeScheduleKind kind :
       {PipeScheduleKind::kGPipe, PipeScheduleKind::kOneForwardOneBackward,
        PipeScheduleKind::kZeroBubbleH1, PipeScheduleKind::kInterleaved1F1B})
    if (name == PipeScheduleName(kind)) return kind;
  return ConfigError("pipeline schedule \"" + name +
                     "\" is not one of \"1f1b\" (default), \"gpipe\", \"zb-h1\", "
                     "\"interleaved\"");
}

std::vector<PipeAction> ForwardActions(const std::vector<PipeAction> &actions) {
  std::vector<PipeAction> forward;
  for (const PipeAction &a : actions)
    if (a.op == PipeOp::kForward || a.op == PipeOp::kSendActivation ||
        a.op == PipeOp::kRecvActivation)
      forward.push_back(a);
  return forward;
}

namespace {

// The actions of one rank, appended in order; `first`/`last` say whether a
// chunk is the pipeline's first / last virtual stage.
class StageWriter {
 public:
  StageWriter(int64_t stage, int64_t stages, int64_t chunks = 1)
      : rank_(stage), ranks_(stages), chunks_(chunks) {}
  std::vector<PipeAction> &actions() { return actions_; }

  void Forward(int64_t i, int64_t chunk = 0) {
    if (!First(chunk)) Add(PipeOp::kRecvActivation, i, chunk);
    Add(PipeOp::kForward, i, chunk);
    if (!Last(chunk)) Add(PipeOp::kSendActivation, i, chunk);
  }
  // The whole backward, or (split) its input-gradient half.
  void Backward(int64_t i, bool split, int64_t chunk = 0) {
    if (!Last(chunk)) Add(PipeOp::kRecvGradient, i, chunk);
    Add(split ? PipeOp::kBackwardInput : PipeOp::kBackward, i, chunk);
    if (!First(chunk)) Add(PipeOp::kSendGradient, i, chunk);
  }
  void Weight(int64_t i) { Add(PipeOp::kBackwardWeight, i, 0); }

 private:
  bool First(int64_t chunk) const { return chunk == 0 && rank_ == 0; }
  bool Last(int64_t chunk) const { return chunk == chunks_ - 1 && rank_ == ranks_ - 1; }
  void Add(PipeOp op, int64_t i, int64_t chunk) { actions_.push_back({op, i, chunk}); }
  int64_t rank_, ranks_, chunks_;
  std::vector<PipeAction> actions_;
};

std::vector<PipeAction> GPipeStage(int64_t r, int64_t p, int64_t m) {
  StageWriter w(r, p);
  for (int64_t i = 0; i < m; ++i) w.Forward(i);
  for (int64_t i = 0; i < m; ++i) w.Backward(i, false);
  return std::move(w.actions());
}

// 1F1B: min(p - r - 1, m) warm-up forwards, then one forward and one
// backward alternately, then the remaining backwards.
std::vector<PipeAction> OneForwardOneBackwardStage(int64_t r, int64_t p, int64_t m) {
  StageWriter w(r, p);
  const int64_t warmup = std::min(p - r - 1, m);
  int64_t next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) w.Forward(next_forward);
  while (next_forward < m) {
    w.Forward(next_forward++);
    w.Backward(next_backward++, false);
  }
  while (next_backward < m) w.Backward(next_backward++, false);
  return std::move(w.actions());
}

// Interleaved 1F1B (Megatron): rank r holds chunks 0..v-1 (virtual stages
// c * p + r). Micro-batches go in rounds of k = m / max(1, m / p) (PyTorch's
// rule, so any m that divides into rounds works): the n-th forward of a rank
// is micro-batch (n / (k v)) k + n % k of chunk (n / k) % v, its n-th
// backward the same micro-batch of chunk v - 1 - (n / k) % v. A rank runs
// (v - 1) k + 2 (p - r - 1) warm-up forwards (Megatron's count), then one
// forward and one backward alternately, then the remaining backwards.
std::vector<PipeAction> InterleavedStage(int64_t r, int64_t p, int64_t m, int64_t v) {
  StageWriter w(r, p, v);
  const int64_t rounds = std::max<int64_t>(1, m / p), k = m / rounds, total = m * v;
  auto micro = [&](int64_t n) { return (n / (k * v)) * k + n % k; };
  auto chunk = [&](int64_t n) { return (n / k) % v; };
  const int64_t warmup = std::min((v - 1) * k + 2 * (p - r - 1), total);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) w.Forward(micro(f), chunk(f));
  while (f < total) {
    w.Forward(micro(f), chunk(f));
    ++f;
    w.Backward(micro(b), false, v - 1 - chunk(b));
    ++b;
  }
  for (; b < total; ++b) w.Backward(micro(b), false, v - 1 - chunk(b));
  return std::move(w.actions());
}

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): the backward split
// into its input-gradient half, on the critical path, and its weight-gradient
// half, which no other stage waits for. Built by list scheduling in unit
// time: each step every stage runs, in this order of preference, its next
// input-gradient half if its gradient has arrived, its next forward if its
// activation has arrived and it holds fewer than p - r + 1 micro-batches
// (one more than 1F1B: a micro-batch's inputs are held until its weight
// gradient), or a pending weight-gradient half; so the weight gradients
// fill the time a stage would wait. In unit time (forward, input gradient
// and weight gradient one unit each) the bubble is the ideal (p - 1) /
// (3m + p - 1) at p = 2 and within a few points of it beyond (p = 4, m = 8:
// 0.17 against 0.11; 1F1B with its two-unit backward: 0.27).
std::vector<std::vector<PipeAction>> ZeroBubbleH1(int64_t p, int64_t m) {
  struct Stage {
    int64_t next_forward = 0, next_backward = 0, in_flight = 0;
    std::deque<int64_t> weights;               // input-gradient done, weight pending
    std::vector<int64_t> act_sent, grad_sent;  // [micro-batch] step sent, -1 not yet
  };
  std::vector<Stage> st(static_cast<size_t>(p));
  for (Stage &x : st) x.act_sent.assign(size_t(m), -1), x.grad_sent.assign(size_t(m), -1);
  std::vector<StageWriter> out;
  for (int64_t r = 0; r < p; ++r) out.emplace_back(r, p);
  auto arrived = [](int64_t sent, int64_t step) { return sent >= 0 && sent < step; };
  int64_t done = 0;
  const int64_t total = p * m * 3;
  for (int64_t step = 0; done < total; ++step) {
    for (int64_t r = 0; r < p; ++r) {
      Stage &x = st[size_t(r)];
      const bool last = r == p - 1, first = r == 0;
      const int64_t b = x.next_backward, f = x.next_forward;
      const bool b_ready = b < f && (last || arrived(st[size_t(r + 1)].grad_sent[size_t(b)], step));
      const bool f_ready = f < m && x.in_flight < p - r + 1 &&
                           (first || arrived(st[size_t(r - 1)].act_sent[size_t(f)], step));
      if (b_ready) {
        out[size_t(r)].Backward(b, true);
        x.grad_sent[size_t(b)] = step;
        x.weights.push_back(b);
        ++x.next_backward;
      } else if (f_ready) {
        out[size_t(r)].Forward(f);
        x.act_sent[size_t(f)] = step;
        ++x.in_flight;
        ++x.next_forward;
      } else if (!x.weights.empty()) {
        out[size_t(r)].Weight(x.weights.front());
        x.weights.pop_front();
        --x.in_flight;
      } else {
        continue;
      }
      ++done;
    }
  }
  std::vector<std::vector<PipeAction>> programs;
  for (StageWriter &w : out) programs.push_back(std::move(w.actions()));
  return programs;
}

}  // namespace

std::vector<std::vector<PipeAction>> BuildPipeSchedule(PipeScheduleKind kind, int64_t stages,
                                                       int64_t micro_batches,
                                                       int64_t virtual_stages) {
  std::vector<std::vector<PipeAction>> programs;
  for (int64_t r = 0; r < stages; ++r) {
    switch (kind) {
      case PipeScheduleKind::kGPipe:
        programs.push_back(GPipeStage(r, stages, micro_batches));
        break;
      case PipeScheduleKind::kOneForwardOneBackward:
        programs.push_back(OneForwardOneBackwardStage(r, stages, micro_batches));
        break;
      case PipeScheduleKind::kZeroBubbleH1:
        break;  // built for all stages at once, below
      case PipeScheduleKind::kInterleaved1F1B:
        programs.push_back(
            InterleavedStage(r, stages, micro_batches, std::max<int64_t>(1, virtual_stages)));
        break;
    }
  }
  if (kind == PipeScheduleKind::kZeroBubbleH1) return ZeroBubbleH1(stages, micro_batches);
  return programs;
}

// ---------------------------------------------------------------- checker

namespace {

// What one stage has done to one micro-batch (step numbers, -1 = not yet).
struct MicroState {
  int64_t recv_act = -1, forward = -1, send_act = -1;
  int64_t recv_grad = -1, backward = -1, weight = -1, send_grad = -1;
};

// Programs are per rank; dependencies are per virtual stage (c * p + r for
// chunk c on rank r; with one chunk, the rank).
struct Simulation {
  const std::vector<std::vector<PipeAction>> &programs;
  int64_t m, v;
  std::vector<std::vector<MicroState>> state;  // [virtual stage][micro-batch]
  std::vector<size_t> next;                    // [rank] next action
  std::vector<int64_t> in_flight, peak;        // [rank]

  int64_t p() const { return int64_t(programs.size()); }
  int64_t Virtual(int64_t r, const PipeAction &a) const { return a.chunk * p() + r; }
  std::string StageName(int64_t vs) const {
    if (v == 1) return "stage " + std::to_string(vs);
    return "rank " + std::to_string(vs % p()) + " chunk " + std::to_string(vs / p());
  }

  std::string Where(int64_t s, size_t k) const {
    const PipeAction &a = programs[size_t(s)][k];
    return (v == 1 ? "stage " + std::to_string(s) : StageName(Virtual(s, a))) + " action " +
           std::to_string(k) + " (" + PipeOpName(a.op) + " of micro-batch " +
           std::to_string(a.micro_batch) + ")";
  }

  // Rule violations that no waiting can fix.
  Status Validate(int64_t s, size_t k) const {
    const PipeAction &a = programs[size_t(s)][k];
    if (a.micro_batch < 0 || a.micro_batch >= m)
      return InternalError(Where(s, k) + ": the step has " + std::to_string(m) + " micro-batches");
    if (a.chunk < 0 || a.chunk >= v)
      return InternalError(Where(s, k) + ": chunk " + std::to_string(a.chunk) + " of " +
                           std::to_string(v));
    const int64_t vs = Virtual(s, a);
    const bool first = vs == 0, last = vs == p() * v - 1;
    const MicroState &x = state[size_t(vs)][size_t(a.micro_batch)];
    auto twice = [&](int64_t done) {
      return done >= 0 ? InternalError(Where(s, k) + ": it already ran") : Status::Ok();
    };
    switch (a.op) {
      case PipeOp::kRecvActivation:
        if (first) return InternalError(Where(s, k) + ": the first stage receives no activations");
        return twice(x.recv_act);
      case PipeOp::kSendActivation:
        if (last) return InternalError(Where(s, k) + ": the last stage sends no activations");
        if (x.forward < 0) return InternalError(Where(s, k) + ": before its forward");
        return twice(x.send_act);
      case PipeOp::kRecvGradient:
        if (last) return InternalError(Where(s, k) + ": the last stage receives no gradients");
        return twice(x.recv_grad);
      case PipeOp::kSendGradient:
        if (first) return InternalError(Where(s, k) + ": the first stage sends no gradients");
        if (x.backward < 0) return InternalError(Where(s, k) + ": before its backward");
        return twice(x.send_grad);
      case PipeOp::kForward:
        return twice(x.forward);
      case PipeOp::kBackward:
      case PipeOp::kBackwardInput:
        if (x.forward < 0) return InternalError(Where(s, k) + ": a backward before its forward");
        return twice(x.backward);
      case PipeOp::kBackwardWeight:
        if (x.backward < 0)
          return InternalError(Where(s, k) + ": a weight gradient before its input gradient");
        return twice(x.weight);
    }
    return Status::Ok();
  }

  // Whether stage s's next action can run at `step` (what it waits for was
  // done in an earlier step). `waits` says for what, when not.
  bool Ready(int64_t s, const PipeAction &a, int64_t step, std::string *waits) const {
    const int64_t vs = Virtual(s, a);
    const MicroState &x = state[size_t(vs)][size_t(a.micro_batch)];
    const bool first = vs == 0, last = vs == p() * v - 1;
    // Another stage's send is visible from the next step; this stage's own
    // receive can be followed by its compute in the same step.
    auto before = [step](int64_t done) { return done >= 0 && done < step; };
    auto by = [step](int64_t done) { return done >= 0 && done <= step; };
    switch (a.op) {
      case PipeOp::kRecvActivation: {
        const int64_t sent = state[size_t(vs - 1)][size_t(a.micro_batch)].send_act;
        *waits = StageName(vs - 1) + " to send it";
        return before(sent);
      }
      case PipeOp::kRecvGradient: {
        const int64_t sent = state[size_t(vs + 1)][size_t(a.micro_batch)].send_grad;
        *waits = StageName(vs + 1) + " to send it";
        return before(sent);
      }
      case PipeOp::kForward:
        *waits = "its activation";
        return first || by(x.recv_act);
      case PipeOp::kBackward:
      case PipeOp::kBackwardInput:
        *waits = "its gradient";
        return last || by(x.recv_grad);
      default:
        return true;  // sends and weight gradients were validated
    }
  }

  void Run(int64_t s, const PipeAction &a, int64_t step) {
    MicroState &x = state[size_t(Virtual(s, a))][size_t(a.micro_batch)];
    const bool split_done = a.op == PipeOp::kBackwardWeight;
    switch (a.op) {
      case PipeOp::kRecvActivation:
        x.recv_act = step;
        break;
      case PipeOp::kSendActivation:
        x.send_act = step;
        break;
      case PipeOp::kRecvGradient:
        x.recv_grad = step;
        break;
      case PipeOp::kSendGradient:
        x.send_grad = step;
        break;
      case PipeOp::kForward:
        x.forward = step;
        peak[size_t(s)] = std::max(peak[size_t(s)], ++in_flight[size_t(s)]);
        break;
      case PipeOp::kBackward:
        x.backward = x.weight = step;
        --in_flight[size_t(s)];
        break;
      case PipeOp::kBackwardInput:
        x.backward = step;
        break;
      case PipeOp::kBackwardWeight:
        x.weight = step;
        break;
    }
    if (split_done) --in_flight[size_t(s)];  // the inputs are read until the weight gradient
  }
};

bool IsCompute(PipeOp op) {
  return op == PipeOp::kForward || op == PipeOp::kBackward || op == PipeOp::kBackwardInput ||
         op == PipeOp::kBackwardWeight;
}

}  // namespace

Result<PipeScheduleCheck> CheckPipeSchedule(const std::vector<std::vector<PipeAction>> &programs,
                                            int64_t micro_batches, int64_t virtual_stages) {
  const int64_t p = int64_t(programs.size()), v = virtual_stages;
  if (p < 1 || micro_batches < 1 || v < 1)
    return InternalError("a pipeline schedule needs at least one stage, chunk and micro-batch");
  Simulation sim{programs,
                 micro_batches,
                 v,
                 std::vector<std::vector<MicroState>>(
                     size_t(p * v), std::vector<MicroState>(size_t(micro_batches))),
                 std::vector<size_t>(size_t(p), 0),
                 std::vector<int64_t>(size_t(p), 0),
                 std::vector<int64_t>(size_t(p), 0)};
  PipeScheduleCheck check;
  check.idle.assign(size_t(p), 0);
  // Each step every stage runs its ready communication (free) and then at
  // most one compute action (one unit).
  for (int64_t step = 0;; ++step) {
    bool all_done = true, progressed = false;
    for (int64_t s = 0; s < p; ++s) {
      const std::vector<PipeAction> &program = programs[size_t(s)];
      bool computed = false;
      while (sim.next[size_t(s)] < program.size()) {
        const size_t k = sim.next[size_t(s)];
        const PipeAction &a = program[k];
        DST_RETURN_IF_ERROR(sim.Validate(s, k));
        if (computed && IsCompute(a.op)) break;
        std::string waits;
        if (!sim.Ready(s, a, step, &waits)) break;
        sim.Run(s, a, step);
        ++sim.next[size_t(s)];
        progressed = true;
        computed |= IsCompute(a.op);
      }
      if (computed) ++check.idle[size_t(s)];  // busy units, turned into idle ones below
      if (sim.next[size_t(s)] < program.size()) all_done = false;
    }
    if (all_done) {
      check.makespan = step + 1;
      break;
    }
    if (!progressed && step > 0) {
      // Nothing moved although every send of the previous step is visible:
      // the stages wait on each other.
      std::string stuck;
      for (int64_t s = 0; s < p; ++s) {
        const size_t k = sim.next[size_t(s)];
        if (k >= programs[size_t(s)].size()) continue;
        std::string waits;
        sim.Ready(s, programs[size_t(s)][k], step + 1, &waits);
        stuck += (stuck.empty() ? "" : "; ") + sim.Where(s, k) + " waits for " + waits;
      }
      return InternalError("the pipeline schedule cannot finish: " + stuck);
    }
  }
  // Everything each virtual stage must do, done exactly once.
  for (int64_t vs = 0; vs < p * v; ++vs)
    for (int64_t i = 0; i < micro_batches; ++i) {
      const MicroState &x = sim.state[size_t(vs)][size_t(i)];
      const std::string who =
          sim.StageName(vs) + " never runs micro-batch " + std::to_string(i) + "'s ";
      if (x.forward < 0) return InternalError(who + "forward");
      if (x.backward < 0) return InternalError(who + "backward");
      if (x.weight < 0) return InternalError(who + "weight gradient");
      if (vs > 0 && (x.recv_act < 0 || x.send_grad < 0))
        return InternalError(who + "activation receive or gradient send");
      if (vs < p * v - 1 && (x.send_act < 0 || x.recv_grad < 0))
        return InternalError(who + "activation send or gradient receive");
    }
  check.peak_in_flight = sim.peak;
  for (int64_t &units : check.idle) units = check.makespan - units;  // idle = step - busy
  return check;
}

}  // namespace dst
