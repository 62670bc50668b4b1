// A flat buffer cut into equal contiguous shards, one per data-parallel rank.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dst {

struct ShardInfo {
  int64_t offset = 0;
  int64_t size = 0;
};

// A flat buffer of `numel` elements padded to a multiple of `dp` and cut into
// dp equal contiguous shards.
struct ShardLayout {
  int64_t numel = 0, padded = 0, dp = 1;
  ShardLayout(int64_t numel_, int64_t dp_);
  int64_t shard_size() const { return padded / dp; }
  ShardInfo Shard(int64_t rank) const { return {rank * shard_size(), shard_size()}; }
  int64_t OwnerOf(int64_t offset) const { return offset / shard_size(); }
  // Calls fn(owner, begin, end) for each piece of [begin, end) that one shard holds.
  template <typename Fn>
  void ForEachOwner(int64_t begin, int64_t end, Fn &&fn) const {
    while (begin < end) {
      const int64_t owner = OwnerOf(begin);
      const int64_t stop = std::min(end, (owner + 1) * shard_size());
      fn(owner, begin, stop);
      begin = stop;
    }
  }
};

}  // namespace dst
