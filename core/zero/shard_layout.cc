#include "core/zero/shard_layout.h"

#include <algorithm>

namespace dst {

ShardLayout::ShardLayout(int64_t numel_, int64_t dp_) : numel(numel_), dp(dp_) {
  // At least one element per rank: a pipeline stage of parameter-free layers
  // (ReLUs, the loss) still has a layout to reduce and step, all padding.
  padded = std::max<int64_t>((numel + dp - 1) / dp * dp, dp);
}

}  // namespace dst
