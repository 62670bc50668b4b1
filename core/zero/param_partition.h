// ZeRO stage 3: partitioned parameters. This rank keeps only its shard of the
// flat parameters (4P/N bytes) plus the persistent small tensors whole (4
// bytes per persistent element, DeepSpeed's stage3_param_persistence_threshold).
// Before a layer's forward and backward its other parameters are gathered
// from their owners into a staging buffer sized for the largest layer; the
// owners broadcast their pieces (an all-gather of uneven pieces, since layers
// do not align with shards). With stage3_prefetch_bucket_size > 0 two staging
// buffers alternate, and the next layer is gathered on the communication
// thread while this one computes; a layer still staged (the head between its
// forward and backward, the embedding between micro-batches) is not gathered
// again until the parameters change.
//
// The storage type is fp32 or 16 bits (mixed precision). With 16-bit storage
// the shard, the persistent tensors and the gathers are 16-bit, and a layer
// reads an fp32 working copy widened after its gather (the persistent
// tensors' working copy is refreshed when the shard changes). Over a group
// of one rank the partition is "local": the shard is the whole buffer and a
// gather is a widening copy (how 16-bit ZeRO 0-2 give layers fp32 weights).
//
// With offload_param on NVMe only the shard's first `resident` elements stay
// in memory; the rest lives in a ParamSwap. A layer's share of it is read
// into a window before its gather, and the shares of the layers after it
// (along the direction the pass walks) are read ahead into the other
// windows. The optimizer step rewrites the shard in order (WriteShard
// between BeginShardWrite and EndShardWrite).
//
// On a device with offload_param (`host_shard`), the shard (its resident
// part) lives in host memory instead of the device's, and the optimizer on
// the host writes it there; a layer's gather copies this rank's pieces up
// into the device's staging buffer, and the broadcasts over the device group
// bring the others. The persistent tensors stay on the device.
#pragma once

#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/layers/params.h"
#include "core/offload/param_swap.h"
#include "core/runtime/memory.h"
#include "core/zero/partition_plan.h"
#include "core/zero/shard_layout.h"
#include "core/zero/storage.h"

namespace dst {

// The largest share of one layer's gathered parameters that falls in a
// rank's swapped part (its shard beyond the first `resident` elements), over
// every rank of `layout`: the size of a parameter swap window.
int64_t LargestSwappedShare(const PartitionPlan &plan, const ShardLayout &layout, int64_t resident);

class ParameterPartition {
 public:
  // Initialises this rank's shard and the persistent tensors exactly as the
  // single-rank run would (initialisation is a pure function of the element).
  // `plan`, `comm` and `store` must outlive this object. `placement`: where
  // the shard, the persistent tensors and the staging and working buffers
  // live and what converts and copies them (the swap file stays host I/O);
  // `host_shard`: the shard in host memory, the rest in the placement's.
  ParameterPartition(const PartitionPlan *plan, const ShardLayout &layout, Communicator *comm,
                     ParamStore<float> *store, MemoryTracker *tracker, uint64_t seed,
                     int64_t prefetch_elements, StorageType storage = StorageType::kFp32,
                     int64_t resident = -1, StepPlacement placement = {}, bool host_shard = false);
  ~ParameterPartition();

  // Offloads the shard beyond `resident` elements (the ctor's) to `swap`
  // and writes its initial values there.
  Status AttachSwap(std::unique_ptr<ParamSwap> swap);
  bool offloaded() const { return swap_ != nullptr; }
  const ParamSwap *swap() const { return swap_.get(); }
  // Elements of the shard in memory (all of it unless offloaded).
  int64_t resident_elements() const { return shard_.size(); }
  // Elements of the shard beyond `resident` (what AttachSwap moves), and
  // the largest share of one layer there, in elements.
  int64_t swapped_elements() const { return layout_.shard_size() - shard_.size(); }
  int64_t largest_swapped_share() const {
    return LargestSwappedShare(*plan_, layout_, shard_.size());
  }
  // Whether shard elements [at, at + n) are in the placement's memory (not
  // swapped, not in host memory while the placement is a device's).
  bool Resident(int64_t at, int64_t n) const { return !host_shard_ && at + n <= shard_.size(); }
  bool host_shard() const { return host_shard_; }
  // Shard elements [at, at + n) from `src` (storage type; in the placement's
  // memory, or the host's when `from_host` or the shard is in host memory). Offloaded: the swapped
  // part is appended to the write pass, in order, or (outside a pass) rewritten in place.
  Status WriteShard(int64_t at, const void *src, int64_t n, bool from_host = false);
  Status BeginShardWrite();
  Status EndShardWrite(int64_t step);
  void AbortShardWrite();

  StorageType storage() const { return shard_.type(); }
  // This rank's parameter shard [shard_size] in the storage type.
  void *shard() { return shard_.at(0); }
  // The same, for fp32 storage.
  float *shard_f32() { return static_cast<float *>(shard_.at(0)); }

  // The layers multiply in bf16 reading the weights' bf16 copies
  // (Model::Bf16Operands): under bf16 storage the tensors marked
  // ParamDecl::bf16_gemm_weight are no longer widened into the working copy
  // after a gather (their fp32 pointer is null, their bf16 one the staging).
  // Call before the first Acquire.
  void SkipWideningBf16GemmWeights();

  // Makes `layer`'s parameters readable through the store (gathering them
  // unless still staged) and, when prefetching, starts gathering layer
  // `next` (-1: none) into the other staging buffer.
  Status Acquire(size_t layer, int64_t next);
  // Waits for a prefetch in flight (on the host).
  Status Drain();
  // The shard changed (optimizer step, checkpoint load): refreshes the
  // persistent copies from their owners and forgets the staged layers.
  Status ShardChanged();
  // The whole tensor `id` into out[numel]. Collective (every rank must call
  // it for the same tensor) unless the tensor is persistent.
  Status Read(int id, float *out);
  // Sets tensor `id` from the whole tensor (every rank passes the same data);
  // local: each rank keeps its piece.
  Status Write(int id, const float *in);

 private:
  struct Staged {
    int64_t layer = -1;
    bool widened = false;                      // 16 bits: working copy up to date
    std::vector<std::unique_ptr<Work>> works;  // the gather in flight
  };

  bool Wide() const { return shard_.type() != StorageType::kFp32; }
  // Over a group of one, with the whole 16-bit shard in host memory, the
  // shard holds every layer's parameters in place: a layer's narrow tensors
  // are read there and the others widened from there, with no gather copy
  // and no staging buffers (only the working copies). Fixed at construction:
  // a whole shard is never swapped (AttachSwap moves only what lies beyond
  // `resident`).
  bool InPlace() const { return in_place_; }
  // Where a tensor of the layer in staging buffer b is read from: the
  // staging buffer, or (InPlace) the shard.
  const void *Source(int b, const TensorSlot &slot) const {
    if (!InPlace()) return staging_[b].at(slot.staged);
    return shard_.at(store_->decls()[size_t(slot.id)].offset - mine_.offset);
  }
  // The bf16 values a layer's tensor reads in buffer b (ParamStore::param16):
  // null unless the storage is bf16.
  const uint16_t *Bf16Of(int b, const TensorSlot &slot) const {
    if (storage() != StorageType::kBf16) return nullptr;
    return static_cast<const uint16_t *>(Source(b, slot));
  }
  // The kernels queued after this call see `layer`'s staged gather: the host
  // waits for it, or on a device the placement's WorkOrder has the compute
  // stream wait (the host goes on; a failure is named at the step's end).
  Status Ready(Staged *staged, size_t layer);
  // What a layer reads from staging buffer b: fp32 (the buffer itself, or
  // its widened working copy).
  float *Working(int b) {
    return Wide() ? working_[b].data() : static_cast<float *>(staging_[b].at(0));
  }
  // Whether a staged tensor is left narrow (SkipWideningBf16GemmWeights).
  bool LeftNarrow(const TensorSlot &slot) const {
    return skip_gemm_weights_ && store_->decls()[size_t(slot.id)].bf16_gemm_weight;
  }
  // The fp32 pointer a staged tensor reads in buffer b: null when left narrow.
  float *WorkingOf(int b, const TensorSlot &slot) {
    return LeftNarrow(slot) ? nullptr : Working(b) + slot.staged;
  }
  // Widens `layout` (staged in buffer b, or in place) into buffer b's
  // working copy, but for the tensors left narrow.
  void WidenStaged(int b, const StagingLayout &layout);
  // A tensor's bf16 values in a 16-bit buffer (staging or persistent; what
  // its working copy was widened from), which bf16 GEMMs read directly
  // (ParamStore::param16); null unless the storage is bf16.
  const uint16_t *Bf16Copy(const FlatBuffer &buffer, const TensorSlot &slot) const {
    if (storage() != StorageType::kBf16) return nullptr;
    return static_cast<const uint16_t *>(buffer.at(slot.staged));
  }
  // Starts gathering `layout`'s segments (storage type) into `dst`; this
  // rank's pieces come from layer `key`'s window when offloaded.
  Status Gather(const StagingLayout &layout, void *dst, std::vector<std::unique_ptr<Work>> *works,
                int64_t key = -2);
  // Shard elements [at, at + n) into `dst` (storage type).
  Status ReadShard(int64_t at, int64_t n, void *dst, int64_t key = -2);
  std::pair<int64_t, int64_t> SwappedShare(size_t layer) const;
  // The swapped bytes of `layer`'s share of this rank's shard.
  std::pair<int64_t, int64_t> SwapRange(size_t layer) const;
  // Refreshes the persistent copies from their owners (collective).
  Status RefreshPersistent();
  // Reads ahead the shares of layers `next`, `next` + d, ... (d: the
  // direction from `layer` to `next`, up when equal) into the free windows.
  Status ReadAhead(size_t layer, int64_t next);
  // Widens the persistent tensors into their working copy.
  void WidenPersistent();
  // Elements [begin, end) of the flat parameters, initialised on the host and
  // narrowed into `dst` (in the memory `ops` copies into) from element `at`.
  void Initialize(int64_t begin, int64_t end, FlatBuffer &dst, int64_t at, const StorageOps &ops);
  // `bytes` from the host into `dst`, in the placement's memory.
  void CopyUp(void *dst, const void *host, size_t bytes) { ops_.Upload(dst, host, bytes); }
  Status WaitStaged(Staged *staged);
  Status Forget();

  const PartitionPlan *plan_;
  ShardLayout layout_;
  Communicator *comm_;
  ParamStore<float> *store_;
  ShardInfo mine_;
  int64_t prefetch_elements_;
  StorageOps ops_;                 // the placement's memory and step backend
  bool host_shard_;                // the shard in host memory (ops_ a device's)
  FlatBuffer shard_;               // [shard_size] kParameters, in shard_ops_'s memory
  FlatBuffer persistent_;          // [persistent.size] kParameters
  Buffer<float> persistent_work_;  // [persistent.size] kCommunication, 16 bits only
  FlatBuffer staging_[2];          // [max_param_staging] kCommunication (one unless prefetching;
                                   // none in place)
  Buffer<float> working_[2];       // [max_param_staging] kCommunication, 16 bits only
  Staged staged_[2];
  int current_ = 0;                 // staging buffer of the layer acquired last
  bool skip_gemm_weights_ = false;  // SkipWideningBf16GemmWeights
  bool in_place_ = false;           // InPlace
  uint64_t seed_;
  std::unique_ptr<ParamSwap> swap_;  // offload_param nvme: the shard beyond shard_
};

}  // namespace dst
