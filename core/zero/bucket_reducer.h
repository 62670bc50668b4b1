// ZeRO stages 0 and 1: the reduction of a full gradient buffer in buckets.
// Buckets are contiguous ranges taken from the top of the buffer, because
// backward finishes the last layers (highest offsets) first; with
// overlap_comm a bucket launches as soon as backward has passed below it.
// Stage 0 all-reduces a bucket; stage 1 reduces it to the rank that owns it
// (buckets never straddle two shards). The buffer holds the storage type
// (fp32 or 16 bits); the wire carries the communication type: the storage
// type in place, or fp32 for 16-bit storage (each bucket widened into one of
// two wire buffers, reduced, and rounded back on the ranks that keep it).
// With gradient compression (grad_compression.h) a bucket is encoded and
// all-gathered instead, and decoded on the ranks that keep it.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/runtime/memory.h"
#include "core/zero/grad_compression.h"
#include "core/zero/shard_layout.h"
#include "core/zero/storage.h"

namespace dst {

// One gradient bucket: [begin, end) of the flat buffer, reduced to `root`
// (stage 1) or all-reduced (root -1, stage 0).
struct GradBucket {
  int64_t begin = 0, end = 0;
  int64_t root = -1;
};

class BucketReducer {
 public:
  // `grads` (storage type, [layout.padded]) and `comm` must outlive this.
  // `codec`: compress every bucket with it (null: reduce them as they are).
  // `placement`: where `grads` lives (the wire buffers go there too, and the
  // conversions run on its step backend); the codec works on the host, so
  // off the host each compressed bucket is copied down and its sum back up.
  BucketReducer(const ShardLayout &layout, int stage, Communicator *comm, void *grads,
                StorageType storage, StorageType wire, int64_t bucket_elements,
                MemoryTracker *tracker, const CodecOptions *codec = nullptr,
                StepPlacement placement = {});
  ~BucketReducer();

  const std::vector<GradBucket> &buckets() const { return buckets_; }
  // Null without compression.
  const GradCompressor *compressor() const { return compressor_.get(); }
  GradCompressor *compressor() { return compressor_.get(); }
  // A step begins: nothing in flight, no bucket launched.
  Status Reset();
  // Backward has finished every gradient at offsets >= boundary: launches
  // the buckets entirely above it.
  Status LaunchAbove(int64_t boundary);
  // Launches what is left and waits for everything.
  Status Finish();
  // This step's gradients stay on their rank (1-bit Adam after its warm-up
  // exchanges the momentum instead): nothing launches until it is cleared.
  void SetLocal(bool local) { local_ = local; }
  // This step's buckets go compressed (with a codec; false: gradient
  // compression's warm-up, the plain reduction).
  void SetCompressed(bool compressed) { compressed_ = compressed; }
  // Called with each bucket's flat range [begin, begin + count) once this
  // rank holds its reduced sum (an all-reduced bucket, or one it owns):
  // ZeRO-Offload on a device copies it down then, during the backward.
  using OnReduced = std::function<void(int64_t begin, int64_t count)>;
  void SetOnReduced(OnReduced on_reduced) { on_reduced_ = std::move(on_reduced); }

 private:
  struct Pending {
    std::unique_ptr<Work> work;
    size_t bucket;
    int wire;  // wire buffer (or compression slot) index, or -1
    bool compressed;
  };
  Status Launch(size_t bucket);
  // Waits for the oldest reduction; rounds a widened bucket back.
  Status WaitOldest();
  // The bucket's sum into the gradients where it went over the wire in
  // another form (converted, compressed).
  Status Unwire(const Pending &p);

  ShardLayout layout_;
  bool local_ = false;
  bool compressed_ = true;
  Communicator *comm_;
  void *grads_;
  StorageType storage_, wire_type_;
  StorageOps ops_;
  std::vector<GradBucket> buckets_;  // from the top of the buffer down
  size_t next_ = 0;
  std::deque<Pending> pending_;
  FlatBuffer wire_[2];  // [bucket] kCommunication, the wire type (when it is not the storage's)
  int next_wire_ = 0;
  std::unique_ptr<GradCompressor> compressor_;
  // Off the host with a codec: each compression slot's bucket on the host.
  std::vector<std::vector<uint8_t>> staged_;
  OnReduced on_reduced_;
};

}  // namespace dst
