// Model specs (GPT, LLaMA, BLOOM, sequential; Hugging Face config.json field
// names): the parser and every validation.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/model/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  (void)dst::ParseModelSpec(std::string_view(reinterpret_cast<const char *>(data), size));
  return 0;
}
