#include "core/pipeline/exchange_order.h"

#include <string>
#include <utility>

namespace dst {

bool IsExchangeAction(PipeOp op) {
  return op == PipeOp::kSendActivation || op == PipeOp::kRecvActivation ||
         op == PipeOp::kSendGradient || op == PipeOp::kRecvGradient;
}

std::vector<bool> ExchangeEnds(const std::vector<PipeAction> &actions) {
  std::vector<bool> ends(actions.size(), false);
  for (size_t k = 0; k < actions.size(); ++k)
    ends[k] = IsExchangeAction(actions[k].op) &&
              (k + 1 == actions.size() || !IsExchangeAction(actions[k + 1].op));
  return ends;
}

namespace {

// What travels: the activations entering, or the gradient leaving, virtual
// stage `to` for micro-batch `mb`.
struct Message {
  bool activation;
  int64_t to, mb;
  bool operator==(const Message &) const = default;
};

std::string Describe(const Message &m) {
  return std::string(m.activation ? "the activations" : "the gradient") + " of micro-batch " +
         std::to_string(m.mb) + " for virtual stage " + std::to_string(m.to);
}

struct PeerOp {
  bool send;
  int64_t peer;
  Message message;
  size_t action;     // its index in the rank's program
  size_t index = 0;  // its place in the (sender, receiver) channel, once posted
};

// Sends and receives posted so far between one ordered pair of ranks.
struct Channel {
  std::vector<Message> sends, receives;
};

class Simulation {
 public:
  Simulation(const std::vector<std::vector<PipeAction>> &programs, int64_t v)
      : programs_(programs), p_(int64_t(programs.size())), v_(v) {
    exchanges_.resize(size_t(p_));
    channels_.resize(size_t(p_ * p_));
    for (int64_t r = 0; r < p_; ++r) {
      const std::vector<PipeAction> &actions = programs[size_t(r)];
      const std::vector<bool> ends = ExchangeEnds(actions);
      std::vector<PeerOp> open;
      for (size_t k = 0; k < actions.size(); ++k) {
        if (!IsExchangeAction(actions[k].op)) continue;
        open.push_back(OpOf(r, actions[k], k));
        if (ends[k]) exchanges_[size_t(r)].push_back(std::move(open)), open.clear();
      }
    }
  }

  // Where a hang can be undone: stage `rank`'s receives at these action
  // indices (program order) move up to follow action `after`, its exchange
  // that is blocked, so that a peer's send waiting for the last of them
  // finds it posted.
  struct Hoist {
    int64_t rank = -1;
    size_t after = 0;
    std::vector<size_t> receives;
  };

  // Ok, or the hang (with a Hoist that undoes it, when a blocked send waits
  // for a receive the peer has not reached) or crossed messages.
  Status Run(Hoist *hoist = nullptr) {
    std::vector<size_t> at(size_t(p_), 0);
    std::vector<bool> posted(size_t(p_), false);
    for (;;) {
      bool moved = false, done = true;
      for (int64_t r = 0; r < p_; ++r) {
        std::vector<std::vector<PeerOp>> &mine = exchanges_[size_t(r)];
        if (at[size_t(r)] == mine.size()) continue;
        done = false;
        std::vector<PeerOp> &exchange = mine[at[size_t(r)]];
        if (!posted[size_t(r)]) {
          for (PeerOp &op : exchange) DST_RETURN_IF_ERROR(Post(r, &op));
          posted[size_t(r)] = moved = true;
        }
        if (Waiting(r, exchange) == nullptr) {
          ++at[size_t(r)];
          posted[size_t(r)] = false;
          moved = true;
        }
      }
      if (done) return Status::Ok();
      if (!moved) {
        if (hoist != nullptr) *hoist = HoistFor(at);
        return Stuck(at);
      }
    }
  }

 private:
  PeerOp OpOf(int64_t r, const PipeAction &a, size_t k) const {
    const int64_t vs = a.chunk * p_ + r;
    switch (a.op) {
      case PipeOp::kSendActivation:
        return {true, (vs + 1) % p_, {true, vs + 1, a.micro_batch}, k};
      case PipeOp::kRecvActivation:
        return {false, (vs - 1) % p_, {true, vs, a.micro_batch}, k};
      case PipeOp::kSendGradient:
        return {true, (vs - 1) % p_, {false, vs - 1, a.micro_batch}, k};
      default:  // kRecvGradient
        return {false, (vs + 1) % p_, {false, vs, a.micro_batch}, k};
    }
  }
  Channel &ChannelOf(int64_t r, const PeerOp &op) {
    const int64_t from = op.send ? r : op.peer, to = op.send ? op.peer : r;
    return channels_[size_t(from * p_ + to)];
  }
  std::string Where(int64_t r, const PeerOp &op) const {
    const PipeAction &a = programs_[size_t(r)][op.action];
    return "stage " + std::to_string(r) + " action " + std::to_string(op.action) + " (" +
           PipeOpName(a.op) + " of micro-batch " + std::to_string(a.micro_batch) +
           (v_ > 1 ? ", chunk " + std::to_string(a.chunk) : std::string()) + ")";
  }

  // Posts `op`; its order-matched partner, if posted, must expect the same message.
  Status Post(int64_t r, PeerOp *op) {
    Channel &c = ChannelOf(r, *op);
    std::vector<Message> &mine = op->send ? c.sends : c.receives;
    const std::vector<Message> &theirs = op->send ? c.receives : c.sends;
    op->index = mine.size();
    mine.push_back(op->message);
    if (op->index < theirs.size() && !(theirs[op->index] == op->message))
      return InternalError(
          "the pipeline's sends and receives do not match in order, as a stream-ordered "
          "transport (NCCL) matches them: " +
          Where(r, *op) + " is " + (op->send ? "send" : "receive") + " number " +
          std::to_string(op->index + 1) + " between stages " +
          std::to_string(op->send ? r : op->peer) + " -> " +
          std::to_string(op->send ? op->peer : r) + " and carries " + Describe(op->message) +
          ", while its partner carries " + Describe(theirs[op->index]));
    return Status::Ok();
  }
  // The first operation of `exchange` whose partner is not posted yet.
  const PeerOp *Waiting(int64_t r, const std::vector<PeerOp> &exchange) {
    for (const PeerOp &op : exchange) {
      Channel &c = ChannelOf(r, op);
      if ((op.send ? c.receives : c.sends).size() <= op.index) return &op;
    }
    return nullptr;
  }
  // A blocked send's peer: its receives from the sender, up to the one the
  // send is matched with, join the peer's blocked exchange.
  Hoist HoistFor(const std::vector<size_t> &at) {
    for (int64_t r = 0; r < p_; ++r) {
      if (at[size_t(r)] == exchanges_[size_t(r)].size()) continue;
      const PeerOp *op = Waiting(r, exchanges_[size_t(r)][at[size_t(r)]]);
      const int64_t peer = op->peer;
      if (!op->send || at[size_t(peer)] == exchanges_[size_t(peer)].size()) continue;
      Hoist h{peer, exchanges_[size_t(peer)][at[size_t(peer)]].back().action, {}};
      size_t missing = op->index + 1 - ChannelOf(r, *op).receives.size();
      for (size_t e = at[size_t(peer)] + 1; e < exchanges_[size_t(peer)].size() && missing; ++e)
        for (const PeerOp &later : exchanges_[size_t(peer)][e])
          if (missing && !later.send && later.peer == r)
            h.receives.push_back(later.action), --missing;
      if (missing == 0) return h;
    }
    return {};
  }
  Status Stuck(const std::vector<size_t> &at) {
    std::string stuck;
    for (int64_t r = 0; r < p_; ++r) {
      if (at[size_t(r)] == exchanges_[size_t(r)].size()) continue;
      const PeerOp *op = Waiting(r, exchanges_[size_t(r)][at[size_t(r)]]);
      stuck += (stuck.empty() ? "" : "; ") + Where(r, *op) + " waits for stage " +
               std::to_string(op->peer) + "'s " + (op->send ? "receive" : "send");
    }
    return InternalError(
        "the pipeline schedule would hang over a stream-ordered transport (NCCL), where a rank's "
        "exchanges run one after another: " +
        stuck);
  }

  const std::vector<std::vector<PipeAction>> &programs_;
  int64_t p_, v_;
  std::vector<std::vector<std::vector<PeerOp>>> exchanges_;  // [rank][exchange][op]
  std::vector<Channel> channels_;                            // [from * p + to]
};

}  // namespace

Status CheckExchanges(const std::vector<std::vector<PipeAction>> &programs,
                      int64_t virtual_stages) {
  if (programs.size() < 2) return Status::Ok();
  return Simulation(programs, virtual_stages).Run();
}

Result<std::vector<std::vector<PipeAction>>> GroupForStreamOrder(
    std::vector<std::vector<PipeAction>> programs, int64_t virtual_stages) {
  if (programs.size() < 2) return programs;
  for (;;) {  // each round moves at least one receive earlier: it ends
    Simulation::Hoist hoist;
    Status st = Simulation(programs, virtual_stages).Run(&hoist);
    if (st.ok()) return programs;
    if (hoist.rank < 0 || hoist.receives.empty()) return st;
    std::vector<PipeAction> &actions = programs[size_t(hoist.rank)];
    std::vector<PipeAction> moved, rest;
    for (size_t k = hoist.after + 1, next = 0; k < actions.size(); ++k) {
      const bool moves = next < hoist.receives.size() && hoist.receives[next] == k;
      (moves ? moved : rest).push_back(actions[k]);
      next += moves;
    }
    actions.resize(hoist.after + 1);
    actions.insert(actions.end(), moved.begin(), moved.end());
    actions.insert(actions.end(), rest.begin(), rest.end());
  }
}

}  // namespace dst
