// Owning handles for the library's opaque objects.
#pragma once

#include <memory>

#include "dstrain/dstrain.h"

namespace dstrain_cli {

struct EngineDeleter {
  void operator()(dst_engine_t *engine) const { dst_engine_destroy(engine); }
};
struct DatasetDeleter {
  void operator()(dst_dataset_t *dataset) const { dst_dataset_destroy(dataset); }
};

using Engine = std::unique_ptr<dst_engine_t, EngineDeleter>;
using Dataset = std::unique_ptr<dst_dataset_t, DatasetDeleter>;

}  // namespace dstrain_cli
