// The communication backend interface: one Communicator per process group,
// asynchronous collectives returning Work handles, a timeout on every wait,
// and a completion hook that records (op, bytes, seconds) for metrics.
// Gloo implements it on CPU (TCP, across hosts); NCCL will implement it on GPUs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/precision/half_ops.h"

namespace dst {

enum class CommOp {
  kAllReduce,
  kReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kBarrier,
  kSend,
  kRecv,
};
inline constexpr int kNumCommOps = 8;

// "allreduce", "reduce", "reduce_scatter", "allgather", "broadcast",
// "barrier", "send", "recv".
const char *CommOpName(CommOp op);

struct CommRecord {
  CommOp op;
  int64_t bytes;   // payload of this rank (the full buffer for allreduce)
  double seconds;  // from the start of the collective to its completion
};

// A pending operation. Wait returns its Status; it must be called before the
// buffers are touched again (and before the Work is destroyed, which waits).
// Test never blocks: true once the operation has finished (Wait then returns
// at once, with its Status).
class Work {
 public:
  virtual ~Work() = default;
  virtual Status Wait() = 0;
  virtual bool Test() = 0;
  // Stream semantics (a device backend's collectives): the CUDA event
  // (a cudaEvent_t) recorded where the operation completes on its stream,
  // which a compute stream can wait on (CudaStream::WaitEvent) without the
  // host blocking; null for work that completes on the host (Gloo). The Work
  // owns the event: keep it until the waiting stream has queued its wait, and
  // still call Wait or Test for the operation's Status.
  virtual void *CompletionEvent() const { return nullptr; }
};

// One send or receive of an Exchange.
struct PeerOp {
  bool send = false;
  void *data = nullptr;  // read by a send, written by a receive
  int64_t bytes = 0;
  int64_t peer = 0;
  uint32_t tag = 0;  // as Send/Recv's; a transport that matches by order (NCCL) ignores it
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  // "dp", "tp", "pp" or "world": used in error messages.
  virtual const std::string &name() const = 0;

  // In-place sum of data[0, count) across the group.
  virtual std::unique_ptr<Work> AllReduceSum(float *data, int64_t count) = 0;
  // Sum of data[0, count) across the group into `root`'s data (others: scratch).
  virtual std::unique_ptr<Work> ReduceSum(float *data, int64_t count, int64_t root) = 0;
  // data[0, size*shard) is summed across the group; afterwards this rank's
  // shard data[rank*shard, (rank+1)*shard) holds the sum (the rest is scratch).
  virtual std::unique_ptr<Work> ReduceScatterSum(float *data, int64_t shard) = 0;
  // Every rank contributes data[rank*shard, (rank+1)*shard); afterwards every
  // rank holds all of data[0, size*shard).
  virtual std::unique_ptr<Work> AllGather(float *data, int64_t shard) = 0;
  virtual std::unique_ptr<Work> Broadcast(float *data, int64_t count, int64_t root) = 0;
  virtual Status Barrier() = 0;

  // Point to point: `bytes` bytes to / from `peer` (a rank of this group,
  // not this one). Both sides name the same `tag`; sends of one (peer, tag)
  // arrive in the order they were posted. Sends and receives run beside the
  // collectives (a pipeline stage can post a receive and a send at once), and
  // their Wait fails after the group's timeout naming the peer, the tag and,
  // when the store knows it, the rank that was lost.
  virtual std::unique_ptr<Work> Send(const void *data, int64_t bytes, int64_t peer,
                                     uint32_t tag) = 0;
  virtual std::unique_ptr<Work> Recv(void *data, int64_t bytes, int64_t peer, uint32_t tag) = 0;
  // Sends and receives posted as one group, none waiting for another (NCCL's
  // ncclGroupStart/End, torch's batch_isend_irecv): two ranks that send to
  // each other in one exchange cannot deadlock, even where a lone send waits
  // for its receive (NCCL's stream order, which also matches sends to
  // receives by order per peer, ignoring tags). One Work completes when all
  // have. The default posts each through Send / Recv (transports whose
  // posting never blocks: Gloo).
  virtual std::unique_ptr<Work> Exchange(const std::vector<PeerOp> &ops);

  // The same on 16-bit data (fp16 or bf16 bit patterns, `type`). A sum adds
  // two values in fp32 and rounds the result to `type` at every step, as a
  // 16-bit reduction on a GPU does. Gathers and broadcasts copy bits.
  virtual std::unique_ptr<Work> AllReduceSum16(uint16_t *data, int64_t count, Half type) = 0;
  virtual std::unique_ptr<Work> ReduceSum16(uint16_t *data, int64_t count, int64_t root,
                                            Half type) = 0;
  virtual std::unique_ptr<Work> AllGather16(uint16_t *data, int64_t shard) = 0;
  virtual std::unique_ptr<Work> Broadcast16(uint16_t *data, int64_t count, int64_t root) = 0;

  using CompletionHook = std::function<void(const CommRecord &)>;
  // Called on the communication thread after each successful collective.
  virtual void SetCompletionHook(CompletionHook hook) = 0;

  // Orders every later operation of this group after the work queued until
  // then on `stream` (a cudaStream_t of this group's device): a device
  // backend records an event there and has its own stream wait on it, so a
  // buffer the compute stream is still writing is not sent early, and the
  // host does not wait. Null: no ordering (buffers the host wrote). A backend
  // without streams (Gloo) supports only null (kNotSupported, named).
  virtual Status OrderAfter(void *stream) {
    if (stream == nullptr) return Status::Ok();
    return Status(Code::kNotSupported, "group '" + name() +
                                           "' completes its operations on the host: there is no "
                                           "stream to order after (use the NCCL backend on GPUs)");
  }
};

// A communicator that passes every call to another one: the base of those
// that change a few operations (hierarchical sums; tests' fault wrappers).
class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int64_t rank() const override { return inner_->rank(); }
  int64_t size() const override { return inner_->size(); }
  const std::string &name() const override { return inner_->name(); }
  std::unique_ptr<Work> AllReduceSum(float *d, int64_t n) override {
    return inner_->AllReduceSum(d, n);
  }
  std::unique_ptr<Work> ReduceSum(float *d, int64_t n, int64_t root) override {
    return inner_->ReduceSum(d, n, root);
  }
  std::unique_ptr<Work> ReduceScatterSum(float *d, int64_t shard) override {
    return inner_->ReduceScatterSum(d, shard);
  }
  std::unique_ptr<Work> AllGather(float *d, int64_t shard) override {
    return inner_->AllGather(d, shard);
  }
  std::unique_ptr<Work> Broadcast(float *d, int64_t n, int64_t root) override {
    return inner_->Broadcast(d, n, root);
  }
  Status Barrier() override { return inner_->Barrier(); }
  Status OrderAfter(void *stream) override { return inner_->OrderAfter(stream); }
  std::unique_ptr<Work> Send(const void *d, int64_t bytes, int64_t peer, uint32_t tag) override {
    return inner_->Send(d, bytes, peer, tag);
  }
  std::unique_ptr<Work> Recv(void *d, int64_t bytes, int64_t peer, uint32_t tag) override {
    return inner_->Recv(d, bytes, peer, tag);
  }
  std::unique_ptr<Work> Exchange(const std::vector<PeerOp> &ops) override {
    return inner_->Exchange(ops);
  }
  std::unique_ptr<Work> AllReduceSum16(uint16_t *d, int64_t n, Half type) override {
    return inner_->AllReduceSum16(d, n, type);
  }
  std::unique_ptr<Work> ReduceSum16(uint16_t *d, int64_t n, int64_t root, Half type) override {
    return inner_->ReduceSum16(d, n, root, type);
  }
  std::unique_ptr<Work> AllGather16(uint16_t *d, int64_t shard) override {
    return inner_->AllGather16(d, shard);
  }
  std::unique_ptr<Work> Broadcast16(uint16_t *d, int64_t n, int64_t root) override {
    return inner_->Broadcast16(d, n, root);
  }
  void SetCompletionHook(CompletionHook hook) override { inner_->SetCompletionHook(hook); }

 protected:
  Communicator &inner() { return *inner_; }

 private:
  std::unique_ptr<Communicator> inner_;
};

// A Work that is already complete (single-rank groups, errors at enqueue).
class DoneWork final : public Work {
 public:
  explicit DoneWork(Status status = Status::Ok()) : status_(std::move(status)) {}
  Status Wait() override { return status_; }
  bool Test() override { return true; }

 private:
  Status status_;
};

// Sum of a per-rank scalar over `group`, carried as two floats (the value and
// its rounding error) so that it keeps about double precision.
inline Result<double> SumOverGroup(Communicator &group, double value) {
  if (group.size() == 1) return value;
  float parts[2];
  parts[0] = float(value);
  parts[1] = float(value - double(parts[0]));
  DST_RETURN_IF_ERROR(group.AllReduceSum(parts, 2)->Wait());
  return double(parts[0]) + double(parts[1]);
}

// A group of one: every collective is a no-op. Lets single-rank training run
// the same code path as data parallelism.
std::unique_ptr<Communicator> MakeSoloCommunicator(std::string name);

}  // namespace dst
