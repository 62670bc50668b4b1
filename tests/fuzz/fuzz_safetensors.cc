// safetensors files: the whole-file reader (header length, JSON, dtypes,
// offsets, sizes) and the tensor-at-a-time reader with every tensor read.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = dst::fuzz::WriteFile(
      "model.safetensors", std::string_view(reinterpret_cast<const char *>(data), size));
  (void)dst::ReadSafetensors(path);
  dst::Result<dst::SafetensorsReader> reader = dst::SafetensorsReader::Open(path);
  if (!reader.ok()) return 0;
  std::vector<char> buffer;
  for (const dst::SafetensorsEntry &e : reader.value().entries()) {
    const uint64_t bytes = e.end - e.begin;
    if (bytes > (uint64_t(64) << 20)) continue;
    buffer.resize(bytes);
    (void)reader.value().Read(e, 0, bytes, buffer.data());
  }
  return 0;
}
