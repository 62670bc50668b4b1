// A caching allocator for device memory (issue 16's device seam): blocks are
// carved out of segments obtained from a DeviceMemoryResource (cudaMalloc on
// a GPU, a fake in the tests) and, once freed, kept for reuse by the same
// stream instead of being returned: after the first training step, a step
// allocates nothing from the device.
//
//   request  -> rounded up to kRound bytes
//   small (<= kSmallLimit): best fit among the stream's free small blocks,
//            else a new kSmallSegment segment split into blocks
//   large:   best fit among the stream's free large blocks, else a new
//            segment of the request rounded up to kLargeRound
//   a block larger than needed is split when the rest is worth keeping;
//   a freed block merges with its free neighbours in the same segment.
//
// A block is reused only by the stream it was allocated on (work queued on
// that stream may still read it; another stream must wait for an event
// first, which the caller arranges). When the resource is out of memory the
// cached free segments are returned and the request is tried once more; a
// request that still fails is an error naming the bytes asked for, held
// and cached. The bytes handed out are charged to a MemoryTracker category.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "core/common/status.h"
#include "core/runtime/memory.h"

namespace dst {

// Where segments come from: a device's raw allocator.
class DeviceMemoryResource {
 public:
  virtual ~DeviceMemoryResource() = default;
  // A region of `bytes`, or an error (Code::kOutOfMemory when out of memory).
  virtual Result<void *> Allocate(size_t bytes) = 0;
  virtual void Free(void *ptr) = 0;
  virtual std::string name() const = 0;  // "cuda:0", "fake"
};

using StreamId = uint64_t;

struct CachingAllocatorStats {
  int64_t allocated_bytes = 0;  // handed out now
  int64_t reserved_bytes = 0;   // held from the resource (handed out + cached)
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t segment_allocations = 0;  // calls to the resource's Allocate
  int64_t segment_frees = 0;        // calls to the resource's Free
  int64_t cache_hits = 0;           // requests served from cached blocks
  int64_t oom_retries = 0;          // times the cache was emptied to retry
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;                  // every block's size and offset
  static constexpr size_t kSmallLimit = 1 << 20;         // 1 MiB
  static constexpr size_t kSmallSegment = 2 << 20;       // segments for small blocks
  static constexpr size_t kLargeRound = 2 << 20;         // large segments' granularity
  static constexpr size_t kMinLargeRemainder = 1 << 20;  // split a large block above this

  // `resource` and `tracker` (may be null) must outlive the allocator.
  CachingAllocator(DeviceMemoryResource *resource, MemoryTracker *tracker);
  // Returns every segment; blocks still handed out are a caller bug (logged
  // into the stats, their segments freed anyway).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator &) = delete;
  CachingAllocator &operator=(const CachingAllocator &) = delete;

  // `bytes` (> 0) for work on `stream`, charged to `category`.
  Result<void *> Allocate(size_t bytes, StreamId stream, MemoryCategory category);
  // Back to the cache; an error for a pointer this allocator did not hand out.
  Status Free(void *ptr);
  // Returns the cached segments that are wholly free to the resource.
  void EmptyCache();
  // Whether `p` points into a block this allocator holds (handed out or cached).
  bool Owns(const void *p) const;
  CachingAllocatorStats stats() const { return stats_; }
  // The size a request is rounded to.
  static size_t RoundedSize(size_t bytes);

 private:
  struct Block;
  struct Segment;
  using FreeKey = std::tuple<StreamId, size_t, uintptr_t>;  // best fit: smallest, then lowest

  Block *FindFree(bool small, StreamId stream, size_t size);
  Result<Block *> NewSegment(bool small, StreamId stream, size_t size);
  Block *Split(Block *block, size_t size, bool small);
  void InsertFree(Block *block);
  void EraseFree(Block *block);
  Block *Merge(Block *block);
  void ReleaseSegment(Segment *segment);
  Status OutOfMemory(size_t bytes, const Status &cause) const;

  DeviceMemoryResource *resource_;
  MemoryTracker *tracker_;
  std::set<FreeKey> free_small_, free_large_;
  std::map<uintptr_t, std::unique_ptr<Block>> blocks_;  // every block by address
  std::map<uintptr_t, std::unique_ptr<Segment>> segments_;
  CachingAllocatorStats stats_;
};

}  // namespace dst
