#include "core/comm/communicator.h"

#include <string>

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
