#include "core/checkpoint/inspect.h"

#include <cstdio>
#include <filesystem>

#include "core/checkpoint/checkpoint.h"

namespace dst {

namespace {


nlohmann::json TensorsJson(const SafetensorsFile &file) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto &[name, t] : file.tensors)
    out.push_back(
        {{"name", name}, {"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"numel", t.numel()}});
  return out;
}

}  // namespace

Result<nlohmann::json> InspectCheckpoint(const std::string &dir, const std::string &tag) {
  Result<LoadedCheckpoint> loaded = ReadCheckpointMeta(dir, tag);
  if (!loaded.ok()) return loaded.status();
  LoadedCheckpoint &ckpt = loaded.value();
  const nlohmann::json &meta = ckpt.meta;
  nlohmann::json out = {{"path", ckpt.path}, {"tag", ckpt.tag}};
  for (const char *key :
       {"format_version", "dstrain_version", "step", "precision", "num_parameters", "topology",
        "optimizer", "lr_scheduler", "loss_scaler", "rng", "client_state", "shards"})
    out[key] = meta.value(key, nlohmann::json());
  if (meta.contains("own_states")) out["own_states"] = meta.at("own_states");
  bool valid = true;
  uint64_t total_bytes = 0;
  nlohmann::json files = nlohmann::json::array();
  std::vector<std::string> names;
  for (const auto &item : meta.at("files").items()) names.push_back(item.key());
  for (const std::string &name : names) {
    const nlohmann::json &entry = meta["files"][name];
    const uint64_t bytes = entry.value("bytes", uint64_t(0));
    total_bytes += bytes;
    Status st = LoadCheckpointFile(&ckpt, name);
    valid = valid && st.ok();
    files.push_back({{"name", name},
                     {"bytes", bytes},
                     {"checksum", entry.value("checksum", "")},
                     {"verified", st.ok()},
                     {"error", st.ok() ? "" : st.message()}});
    if (!st.ok()) continue;
    if (name == kModelFile) out["tensors"] = TensorsJson(ckpt.files.at(name));
    ckpt.files.erase(name);  // one file in memory at a time
  }
  out["files"] = files;
  out["total_bytes"] = total_bytes;
  out["valid"] = valid;
  return out;
}

Status ExportCheckpointWeights(const std::string &dir, const std::string &tag,
                               const std::string &out_path) {
  Result<LoadedCheckpoint> loaded = ReadCheckpointMeta(dir, tag);
  if (!loaded.ok()) return loaded.status();
  DST_RETURN_IF_ERROR(LoadCheckpointFile(&loaded.value(), kModelFile));
  const SafetensorsFile &weights = loaded->files.at(kModelFile);
  std::vector<TensorRef> tensors;
  for (const auto &[name, t] : weights.tensors) {
    if (t.dtype != TensorDType::kF32)
      return CheckpointError(loaded->path + "/" + kModelFile + ": tensor \"" + name + "\" is " +
                             DTypeName(t.dtype) + ", expected F32");
    tensors.push_back({name, t.dtype, t.shape, t.bytes.data()});
  }
  const std::string tmp = out_path + ".tmp";
  Status st = WriteSafetensors(tmp, tensors, {{"format", "pt"}});
  if (!st.ok()) {
    std::remove(tmp.c_str());
    return st.context("exporting weights");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return IoError("exporting weights: cannot rename " + tmp + " to " + out_path + ": " +
                   ec.message());
  }
  return Status::Ok();
}

}  // namespace dst
