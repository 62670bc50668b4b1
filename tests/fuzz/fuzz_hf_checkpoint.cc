// A Hugging Face model directory, as `--model DIR` and the import read it:
// config.json (first part) through the model spec, the sharded index
// model.safetensors.index.json (second) and its shard (third), each tensor
// read.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/checkpoint/hf_checkpoint.h"
#include "core/model/model_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const auto parts = dst::fuzz::Split(data, size, "\n--\n", 3);
  const std::string dir = dst::fuzz::ScratchDir() + "/hf";
  std::filesystem::create_directories(dir);
  dst::fuzz::WriteFile("hf/config.json", parts[0]);
  if (parts[1].empty()) {
    std::filesystem::remove(dir + "/model.safetensors.index.json");
    dst::fuzz::WriteFile("hf/model.safetensors", parts[2]);
    std::filesystem::remove(dir + "/model-00001-of-00001.safetensors");
  } else {
    dst::fuzz::WriteFile("hf/model.safetensors.index.json", parts[1]);
    dst::fuzz::WriteFile("hf/model-00001-of-00001.safetensors", parts[2]);
    std::filesystem::remove(dir + "/model.safetensors");
  }
  (void)dst::ParseModelSpec(R"({"type": "hf", "path": ")" + dir + R"("})");
  dst::Result<dst::HfCheckpoint> checkpoint = dst::HfCheckpoint::Open(dir);
  if (!checkpoint.ok()) return 0;
  std::vector<char> buffer;
  for (const std::string &name : checkpoint.value().Names()) {
    const dst::HfCheckpoint::Tensor t = checkpoint.value().Find(name);
    if (t.entry == nullptr) std::abort();
    const uint64_t bytes = t.entry->end - t.entry->begin;
    if (bytes > (uint64_t(64) << 20)) continue;
    buffer.resize(bytes);
    (void)checkpoint.value().ReadAll(t, buffer.data());
  }
  return 0;
}
