// ds_config.json: the parser, "auto" resolution and every validation, for
// world sizes 1-8 and a known or unknown step count (the first byte).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  dst::ConfigContext context;
  context.world_size = 1 + (data[0] & 7);
  context.total_steps = (data[0] & 8) ? 100 : 0;
  const std::string_view text(reinterpret_cast<const char *>(data + 1), size - 1);
  dst::Result<dst::Config> config = dst::ParseConfig(text, context);
  if (config.ok()) (void)dst::SteppedOptimizer(config.value());
  return 0;
}
