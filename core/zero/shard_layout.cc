#include "core/zero/shard_layout.h"

namespace dst {

ShardLayout::ShardLayout(int64_t numel_, int64_t dp_) : numel(numel_), dp(dp_) {
  padded = (numel + dp - 1) / dp * dp;
}

}  // namespace dst
