// Training data: token files (llm.c's .bin v1/v2, nanoGPT's raw uint16) and
// text, opened as `--data` does and a batch of windows drawn from each split.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/data/text_dataset.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void DrawBatches(const dst::TextDataset &data) {
  for (dst::Split split : {dst::Split::kTrain, dst::Split::kVal}) {
    if (data.num_tokens(split) < 3) continue;
    dst::BatchRequest request;
    request.split = split;
    request.batch_index = 3;
    request.n_samples = 2;
    request.seq_len = 2;
    std::vector<int32_t> tokens(request.num_elements()), targets(request.num_elements());
    (void)data.Batch(request, dst::BatchBuffers{tokens, targets});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char *>(data), size);
  const std::string bin = dst::fuzz::WriteFile("train.bin", bytes);
  if (auto tokens = dst::TextDataset::OpenTokens(bin, 0.1, 1); tokens.ok())
    DrawBatches(tokens.value());
  const std::string text = dst::fuzz::WriteFile("train.txt", bytes);
  if (auto chars = dst::TextDataset::Open(text, 0.1, 1); chars.ok()) DrawBatches(chars.value());
  return 0;
}
