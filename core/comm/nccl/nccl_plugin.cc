// The NCCL backend as a plugin: libdstrain_nccl.so, built when the CUDA
// toolkit and NCCL are found, loaded by core/comm/nccl_communicator.cc with
// dlopen only when a job asks for NCCL. libdstrain.so itself therefore does
// not depend on CUDA or NCCL: it loads on machines without them, and their
// thread-local storage is not carved out of every thread's stack (CivetWeb's
// fixed 100 KiB worker stacks could not spare it).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/nccl_communicator.h"

namespace dst {

namespace {

using Clock = std::chrono::steady_clock;

std::string CudaText(cudaError_t e) {
  return cudaGetErrorString(e);
}
std::string NcclText(ncclResult_t r) {
  return ncclGetErrorString(r);
}

// Waits for an event with a deadline; aborts the communicator on timeout,
// or when this rank's engine is aborted, so that every later call fails
// instead of hanging.
class NcclWork final : public Work {
 public:
  NcclWork(cudaEvent_t event, ncclComm_t comm, std::chrono::milliseconds timeout, std::string what,
           Status enqueue_status, std::shared_ptr<const AbortSignal> abort)
      : event_(event),
        comm_(comm),
        timeout_(timeout),
        what_(std::move(what)),
        status_(std::move(enqueue_status)),
        abort_(std::move(abort)) {}
  ~NcclWork() override {
    (void)Wait();
    if (event_) cudaEventDestroy(event_);
  }
  void *CompletionEvent() const override { return event_; }
  // True once finished, or failed: the communicator's asynchronous error (a
  // peer lost) counts, so a WorkOrder finds the failure without waiting.
  bool Test() override {
    if (done_ || !status_.ok()) return true;
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess || async == ncclSuccess) return false;
    }
    (void)Wait();  // finished or failed: Wait records which
    return true;
  }
  Status Wait() override {
    if (done_ || !status_.ok()) return status_;
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      const cudaError_t e = cudaEventQuery(event_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        status_ = Status(Code::kComm, what_ + " failed: " + CudaText(e));
        break;
      }
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess) {
        status_ = Status(Code::kComm, what_ + " failed: " + NcclText(async));
        ncclCommAbort(comm_);
        break;
      }
      if (Raised(abort_.get())) {
        status_ = AbortedError(what_);
        ncclCommAbort(comm_);
        break;
      }
      if (Clock::now() > deadline) {
        status_ = Status(Code::kComm, what_ + " timed out after " +
                                          std::to_string(timeout_.count() / 1000) +
                                          " s: a peer rank has died or stalled");
        ncclCommAbort(comm_);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    done_ = true;
    return status_;
  }

 private:
  cudaEvent_t event_;
  ncclComm_t comm_;
  std::chrono::milliseconds timeout_;
  std::string what_;
  Status status_;
  std::shared_ptr<const AbortSignal> abort_;
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclOptions &options, ncclComm_t comm, cudaStream_t stream)
      : options_(options), comm_(comm), stream_(stream) {}
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    if (order_event_) cudaEventDestroy(order_event_);
    cudaStreamDestroy(stream_);
  }
  Status OrderAfter(void *stream) override {
    if (stream != nullptr && order_event_ == nullptr) {
      const cudaError_t e = cudaEventCreateWithFlags(&order_event_, cudaEventDisableTiming);
      if (e != cudaSuccess)
        return Status(Code::kComm,
                      "group '" + options_.name + "': an ordering event: " + CudaText(e));
    }
    producer_ = static_cast<cudaStream_t>(stream);
    return Status::Ok();
  }
  int64_t rank() const override { return options_.rank; }
  int64_t size() const override { return options_.size; }
  const std::string &name() const override { return options_.name; }
  void SetCompletionHook(CompletionHook hook) override { hook_ = std::move(hook); }

  std::unique_ptr<Work> AllReduceSum(float *data, int64_t count) override {
    return Launch(CommOp::kAllReduce, count * 4, [&] {
      return ncclAllReduce(data, data, size_t(count), ncclFloat, ncclSum, comm_, stream_);
    });
  }
  std::unique_ptr<Work> ReduceSum(float *data, int64_t count, int64_t root) override {
    return Launch(CommOp::kReduce, count * 4, [&] {
      return ncclReduce(data, data, size_t(count), ncclFloat, ncclSum, int(root), comm_, stream_);
    });
  }
  std::unique_ptr<Work> ReduceScatterSum(float *data, int64_t shard) override {
    return Launch(CommOp::kReduceScatter, shard * size() * 4, [&] {
      return ncclReduceScatter(data, data + rank() * shard, size_t(shard), ncclFloat, ncclSum,
                               comm_, stream_);
    });
  }
  std::unique_ptr<Work> AllGather(float *data, int64_t shard) override {
    return Launch(CommOp::kAllGather, shard * size() * 4, [&] {
      return ncclAllGather(data + rank() * shard, data, size_t(shard), ncclFloat, comm_, stream_);
    });
  }
  std::unique_ptr<Work> Broadcast(float *data, int64_t count, int64_t root) override {
    return Launch(CommOp::kBroadcast, count * 4, [&] {
      return ncclBroadcast(data, data, size_t(count), ncclFloat, int(root), comm_, stream_);
    });
  }
  std::unique_ptr<Work> AllReduceSum16(uint16_t *data, int64_t count, Half type) override {
    return Launch(CommOp::kAllReduce, count * 2, [&] {
      return ncclAllReduce(data, data, size_t(count), NcclType(type), ncclSum, comm_, stream_);
    });
  }
  std::unique_ptr<Work> ReduceSum16(uint16_t *data, int64_t count, int64_t root,
                                    Half type) override {
    return Launch(CommOp::kReduce, count * 2, [&] {
      return ncclReduce(data, data, size_t(count), NcclType(type), ncclSum, int(root), comm_,
                        stream_);
    });
  }
  std::unique_ptr<Work> AllGather16(uint16_t *data, int64_t shard) override {
    return Launch(CommOp::kAllGather, shard * size() * 2, [&] {
      return ncclAllGather(data + rank() * shard, data, size_t(shard), ncclFloat16, comm_, stream_);
    });
  }
  std::unique_ptr<Work> Broadcast16(uint16_t *data, int64_t count, int64_t root) override {
    return Launch(CommOp::kBroadcast, count * 2, [&] {
      return ncclBroadcast(data, data, size_t(count), ncclFloat16, int(root), comm_, stream_);
    });
  }
  // tag: NCCL matches sends and receives by order per peer, not by tag.
  std::unique_ptr<Work> Send(const void *data, int64_t bytes, int64_t peer, uint32_t) override {
    return Launch(CommOp::kSend, bytes, [&] {
      return ncclSend(data, size_t(bytes), ncclUint8, int(peer), comm_, stream_);
    });
  }
  std::unique_ptr<Work> Recv(void *data, int64_t bytes, int64_t peer, uint32_t) override {
    return Launch(CommOp::kRecv, bytes, [&] {
      return ncclRecv(data, size_t(bytes), ncclUint8, int(peer), comm_, stream_);
    });
  }
  // One NCCL group: the operations start together, so a send and a receive
  // between the same two ranks in one exchange cannot wait for each other.
  std::unique_ptr<Work> Exchange(const std::vector<PeerOp> &ops) override {
    int64_t sent = 0;
    for (const PeerOp &op : ops) sent += op.send ? op.bytes : 0;
    return Launch(CommOp::kSend, sent, [&] {
      ncclResult_t r = ncclGroupStart();
      for (size_t i = 0; r == ncclSuccess && i < ops.size(); ++i) {
        const PeerOp &op = ops[i];
        r = op.send ? ncclSend(op.data, size_t(op.bytes), ncclUint8, int(op.peer), comm_, stream_)
                    : ncclRecv(op.data, size_t(op.bytes), ncclUint8, int(op.peer), comm_, stream_);
      }
      const ncclResult_t ended = ncclGroupEnd();  // also after a failed call: the group closes
      return r != ncclSuccess ? r : ended;
    });
  }
  Status Barrier() override {
    float *one = nullptr;
    if (cudaMalloc(&one, sizeof(float)) != cudaSuccess)
      return Status(Code::kComm, "barrier on group '" + options_.name + "': cudaMalloc failed");
    Status st = AllReduceSum(one, 1)->Wait();
    cudaFree(one);
    return st;
  }

 private:
  static ncclDataType_t NcclType(Half type) {
    return type == Half::kFp16 ? ncclFloat16 : ncclBfloat16;
  }
  // Orders the operation after the producer stream (OrderAfter), enqueues it
  // on this group's stream and records its completion event.
  template <typename Enqueue>
  std::unique_ptr<Work> Launch(CommOp op, int64_t bytes, Enqueue enqueue) {
    const std::string what = std::string(CommOpName(op)) + " of " + std::to_string(bytes) +
                             " bytes on group '" + options_.name + "' (rank " +
                             std::to_string(rank()) + " of " + std::to_string(size()) + ")";
    if (producer_ != nullptr) {
      cudaError_t e = cudaEventRecord(order_event_, producer_);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, order_event_, 0);
      if (e != cudaSuccess)
        return std::make_unique<DoneWork>(
            Status(Code::kComm, what + ": ordering after the compute stream: " + CudaText(e)));
    }
    const ncclResult_t enqueued = enqueue();
    if (enqueued != ncclSuccess)
      return std::make_unique<DoneWork>(Status(Code::kComm, what + ": " + NcclText(enqueued)));
    cudaEvent_t event = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(event, stream_);
    if (e != cudaSuccess)
      return std::make_unique<DoneWork>(Status(Code::kComm, what + ": " + CudaText(e)));
    if (hook_) hook_(CommRecord{op, bytes, 0.0});  // GPU timing comes with the metrics issue
    return std::make_unique<NcclWork>(event, comm_, options_.timeout, what, Status::Ok(),
                                      options_.abort);
  }

  NcclOptions options_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaStream_t producer_ = nullptr;    // OrderAfter's stream, or none
  cudaEvent_t order_event_ = nullptr;  // recorded on producer_ before each operation
  CompletionHook hook_;
};

}  // namespace

namespace {

Result<std::unique_ptr<Communicator>> Connect(Store &store, const NcclOptions &options) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return Status(Code::kComm, "group '" + options.name +
                                   "': no CUDA device is visible to this process; use the Gloo "
                                   "backend on CPU");
  const std::string key = "nccl/" + options.name + "/unique_id";
  ncclUniqueId id;
  if (options.rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      return Status(Code::kComm, "ncclGetUniqueId failed: " + NcclText(r));
    std::vector<uint8_t> bytes(sizeof id);
    std::memcpy(bytes.data(), &id, sizeof id);
    DST_RETURN_IF_ERROR(store.Set(key, bytes));
  } else {
    Result<std::vector<uint8_t>> bytes = store.Get(key, options.timeout);
    if (!bytes.ok()) return bytes.status();
    if (bytes.value().size() != sizeof id)
      return Status(Code::kComm, "the NCCL unique id from rank 0 has the wrong size");
    std::memcpy(&id, bytes.value().data(), sizeof id);
  }
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&comm, int(options.size), id, int(options.rank));
      r != ncclSuccess)
    return Status(Code::kComm, "ncclCommInitRank for group '" + options.name + "' (rank " +
                                   std::to_string(options.rank) + " of " +
                                   std::to_string(options.size) + ") failed: " + NcclText(r));
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    ncclCommDestroy(comm);
    return Status(Code::kComm, "cudaStreamCreate failed: " + CudaText(e));
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(options, comm, stream));
}

}  // namespace

}  // namespace dst

// The plugin's one entry point (see NcclPluginCreateFn).
extern "C" __attribute__((visibility("default"))) dst::Communicator *dst_nccl_plugin_create(
    dst::Store *store, const dst::NcclOptions *options, dst::Status *status) {
  try {
    dst::Result<std::unique_ptr<dst::Communicator>> comm = dst::Connect(*store, *options);
    if (!comm.ok()) {
      *status = comm.status();
      return nullptr;
    }
    return std::move(comm).value().release();
  } catch (const std::exception &e) {
    *status = dst::Status(dst::Code::kInternal, std::string("NCCL plugin: ") + e.what());
    return nullptr;
  }
}
