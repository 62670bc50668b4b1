#include "core/comm/communicator.h"

#include <string>
#include <utility>
#include <vector>

namespace dst {

const char *CommOpName(CommOp op) {
  switch (op) {
    case CommOp::kAllReduce:
      return "allreduce";
    case CommOp::kReduce:
      return "reduce";
    case CommOp::kReduceScatter:
      return "reduce_scatter";
    case CommOp::kAllGather:
      return "allgather";
    case CommOp::kBroadcast:
      return "broadcast";
    case CommOp::kBarrier:
      return "barrier";
    case CommOp::kSend:
      return "send";
    case CommOp::kRecv:
      return "recv";
  }
  return "unknown";
}

namespace {

// The Works of an exchange's operations, as one.
class GroupWork final : public Work {
 public:
  explicit GroupWork(std::vector<std::unique_ptr<Work>> parts) : parts_(std::move(parts)) {}
  Status Wait() override {
    Status first;
    for (std::unique_ptr<Work> &w : parts_) {
      Status st = w->Wait();
      if (!st.ok() && first.ok()) first = std::move(st);
    }
    return first;
  }
  bool Test() override {
    for (std::unique_ptr<Work> &w : parts_)
      if (!w->Test()) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<Work>> parts_;
};

}  // namespace

std::unique_ptr<Work> Communicator::Exchange(const std::vector<PeerOp> &ops) {
  std::vector<std::unique_ptr<Work>> parts;
  parts.reserve(ops.size());
  for (const PeerOp &op : ops)
    parts.push_back(op.send ? Send(op.data, op.bytes, op.peer, op.tag)
                            : Recv(op.data, op.bytes, op.peer, op.tag));
  return std::make_unique<GroupWork>(std::move(parts));
}

namespace {

class SoloCommunicator final : public Communicator {
 public:
  explicit SoloCommunicator(std::string name) : name_(std::move(name)) {}
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 1; }
  const std::string &name() const override { return name_; }
  std::unique_ptr<Work> AllReduceSum(float *, int64_t) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> ReduceSum(float *, int64_t, int64_t) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> ReduceScatterSum(float *, int64_t) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> AllGather(float *, int64_t) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> Broadcast(float *, int64_t, int64_t) override {
    return std::make_unique<DoneWork>();
  }
  Status Barrier() override { return Status::Ok(); }
  std::unique_ptr<Work> AllReduceSum16(uint16_t *, int64_t, Half) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> ReduceSum16(uint16_t *, int64_t, int64_t, Half) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> AllGather16(uint16_t *, int64_t) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> Broadcast16(uint16_t *, int64_t, int64_t) override {
    return std::make_unique<DoneWork>();
  }
  void SetCompletionHook(CompletionHook) override {}
  // A group of one has no peer to talk to.
  std::unique_ptr<Work> Send(const void *, int64_t bytes, int64_t peer, uint32_t tag) override {
    return NoPeer("send", bytes, peer, tag);
  }
  std::unique_ptr<Work> Recv(void *, int64_t bytes, int64_t peer, uint32_t tag) override {
    return NoPeer("recv", bytes, peer, tag);
  }

 private:
  std::unique_ptr<Work> NoPeer(const char *op, int64_t bytes, int64_t peer, uint32_t tag) const {
    return std::make_unique<DoneWork>(
        InternalError(std::string(op) + " of " + std::to_string(bytes) + " bytes with rank " +
                      std::to_string(peer) + " (tag " + std::to_string(tag) + ") on group '" +
                      name_ + "', which has one rank: there is no peer"));
  }
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> MakeSoloCommunicator(std::string name) {
  return std::make_unique<SoloCommunicator>(std::move(name));
}

}  // namespace dst
