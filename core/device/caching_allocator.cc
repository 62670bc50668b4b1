#include "core/device/caching_allocator.h"

#include <algorithm>

namespace dst {

// A run of bytes in a segment, handed out or cached; neighbours in address order.
struct CachingAllocator::Block {
  uintptr_t addr = 0;
  size_t size = 0;
  StreamId stream = 0;
  bool small = false;
  bool in_use = false;
  MemoryCategory category = MemoryCategory::kActivations;
  Segment *segment = nullptr;
  Block *prev = nullptr, *next = nullptr;
};

// One region obtained from the resource.
struct CachingAllocator::Segment {
  void *ptr = nullptr;
  size_t size = 0;
};

namespace {
size_t RoundUp(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}
}  // namespace

CachingAllocator::CachingAllocator(DeviceMemoryResource *resource, MemoryTracker *tracker)
    : resource_(resource), tracker_(tracker) {}

CachingAllocator::~CachingAllocator() {
  for (auto &[addr, segment] : segments_) resource_->Free(segment->ptr);
}

size_t CachingAllocator::RoundedSize(size_t bytes) {
  return std::max(kRound, RoundUp(bytes, kRound));
}

Result<void *> CachingAllocator::Allocate(size_t bytes, StreamId stream, MemoryCategory category) {
  if (bytes == 0) return InvalidArgument("CachingAllocator::Allocate: 0 bytes asked for");
  const size_t size = RoundedSize(bytes);
  const bool small = size <= kSmallLimit;
  Block *block = FindFree(small, stream, size);
  if (block != nullptr) {
    ++stats_.cache_hits;
  } else {
    Result<Block *> fresh = NewSegment(small, stream, size);
    if (!fresh.ok() && stats_.reserved_bytes > stats_.allocated_bytes) {
      ++stats_.oom_retries;  // cached blocks of other sizes or streams: give them back, retry
      EmptyCache();
      fresh = NewSegment(small, stream, size);
    }
    if (!fresh.ok()) return OutOfMemory(bytes, fresh.status());
    block = fresh.value();
  }
  block = Split(block, size, small);
  block->in_use = true;
  block->category = category;
  stats_.allocated_bytes += int64_t(block->size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  if (tracker_ != nullptr) tracker_->Add(category, int64_t(block->size));
  return reinterpret_cast<void *>(block->addr);
}

Status CachingAllocator::Free(void *ptr) {
  auto found = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (found == blocks_.end() || !found->second->in_use)
    return InvalidArgument(
        "CachingAllocator::Free: this pointer was not handed out by the allocator (or was "
        "freed twice)");
  Block *block = found->second.get();
  block->in_use = false;
  stats_.allocated_bytes -= int64_t(block->size);
  if (tracker_ != nullptr) tracker_->Release(block->category, int64_t(block->size));
  InsertFree(Merge(block));
  return Status::Ok();
}

bool CachingAllocator::Owns(const void *p) const {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  auto it = blocks_.upper_bound(at);
  if (it == blocks_.begin()) return false;
  --it;
  return at < it->first + it->second->size;
}

void CachingAllocator::EmptyCache() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment *segment = it->second.get();
    Block *first = blocks_.at(it->first).get();
    ++it;
    if (!first->in_use && first->size == segment->size) {
      EraseFree(first);
      blocks_.erase(first->addr);
      ReleaseSegment(segment);
    }
  }
}

CachingAllocator::Block *CachingAllocator::FindFree(bool small, StreamId stream, size_t size) {
  std::set<FreeKey> &pool = small ? free_small_ : free_large_;
  auto it = pool.lower_bound({stream, size, 0});
  if (it == pool.end() || std::get<0>(*it) != stream) return nullptr;
  Block *block = blocks_.at(std::get<2>(*it)).get();
  pool.erase(it);
  return block;
}

Result<CachingAllocator::Block *> CachingAllocator::NewSegment(bool small, StreamId stream,
                                                               size_t size) {
  const size_t bytes = small ? kSmallSegment : RoundUp(size, kLargeRound);
  Result<void *> region = resource_->Allocate(bytes);
  if (!region.ok()) return region.status();
  ++stats_.segment_allocations;
  stats_.reserved_bytes += int64_t(bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(region.value());
  auto segment = std::make_unique<Segment>(Segment{region.value(), bytes});
  auto block = std::make_unique<Block>();
  block->addr = addr;
  block->size = bytes;
  block->stream = stream;
  block->small = small;
  block->segment = segment.get();
  Block *raw = block.get();
  segments_.emplace(addr, std::move(segment));
  blocks_.emplace(addr, std::move(block));
  return raw;
}

// Keeps `size` bytes of a free block and caches the rest when it is worth keeping.
CachingAllocator::Block *CachingAllocator::Split(Block *block, size_t size, bool small) {
  const size_t rest = block->size - size;
  const bool worth = small ? rest >= kRound : rest > kMinLargeRemainder;
  if (!worth) return block;
  auto tail = std::make_unique<Block>(*block);
  tail->addr = block->addr + size;
  tail->size = rest;
  tail->in_use = false;
  tail->prev = block;
  tail->next = block->next;
  if (block->next != nullptr) block->next->prev = tail.get();
  block->next = tail.get();
  block->size = size;
  Block *raw = tail.get();
  blocks_.emplace(raw->addr, std::move(tail));
  InsertFree(raw);
  return block;
}

void CachingAllocator::InsertFree(Block *block) {
  (block->small ? free_small_ : free_large_).insert({block->stream, block->size, block->addr});
}

void CachingAllocator::EraseFree(Block *block) {
  (block->small ? free_small_ : free_large_).erase({block->stream, block->size, block->addr});
}

// Joins a newly freed block with its free neighbours; returns the joined block.
CachingAllocator::Block *CachingAllocator::Merge(Block *block) {
  if (Block *next = block->next; next != nullptr && !next->in_use) {
    EraseFree(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    blocks_.erase(next->addr);
  }
  if (Block *prev = block->prev; prev != nullptr && !prev->in_use) {
    EraseFree(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    blocks_.erase(block->addr);
    block = prev;
  }
  return block;
}

void CachingAllocator::ReleaseSegment(Segment *segment) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(segment->ptr);
  stats_.reserved_bytes -= int64_t(segment->size);
  ++stats_.segment_frees;
  resource_->Free(segment->ptr);
  segments_.erase(addr);
}

Status CachingAllocator::OutOfMemory(size_t bytes, const Status &cause) const {
  return Status(Code::kOutOfMemory,
                "out of device memory on " + resource_->name() + ": asked for " +
                    std::to_string(bytes) + " bytes while this allocator holds " +
                    std::to_string(stats_.reserved_bytes) + " (" +
                    std::to_string(stats_.allocated_bytes) +
                    " in use, the rest cached and returned before retrying): " + cause.message() +
                    ". Lower train_micro_batch_size_per_gpu, turn on activation checkpointing, "
                    "or shard more (ZeRO stage 3, offload)");
}

}  // namespace dst
