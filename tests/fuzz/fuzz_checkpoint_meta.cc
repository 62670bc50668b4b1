// A checkpoint directory: DIR/latest (first part), DIR/TAG/meta.json
// (second) with a meta.json.sum that matches it (or, when the first byte of
// the input is '!', none), and the model file it lists (third); then every
// file meta.json lists is verified and read as a load does.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/checksum.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const bool without_sum = size > 0 && data[0] == '!';
  const auto parts = dst::fuzz::Split(data, size, "\n--\n", 3);
  const std::string dir = dst::fuzz::ScratchDir() + "/ckpt";
  std::filesystem::create_directories(dir + "/global_step2");
  dst::fuzz::WriteFile("ckpt/latest", parts[0]);
  dst::fuzz::WriteFile("ckpt/global_step2/meta.json", parts[1]);
  const std::string sum = dir + "/global_step2/meta.json.sum";
  if (without_sum) {
    std::filesystem::remove(sum);
  } else {
    dst::Checksum64 checksum;
    checksum.Update(parts[1].data(), parts[1].size());
    dst::fuzz::WriteFile("ckpt/global_step2/meta.json.sum", checksum.Hex() + "  meta.json\n");
  }
  dst::fuzz::WriteFile("ckpt/global_step2/model.safetensors", parts[2]);
  for (const char *tag : {"", "global_step2"}) {
    dst::Result<dst::LoadedCheckpoint> meta = dst::ReadCheckpointMeta(dir, tag);
    if (!meta.ok()) continue;
    const nlohmann::json *files =
        meta.value().meta.contains("files") ? &meta.value().meta["files"] : nullptr;
    if (files == nullptr || !files->is_object()) continue;
    for (const auto &item : files->items())
      (void)dst::LoadCheckpointFile(&meta.value(), item.key());
  }
  return 0;
}
