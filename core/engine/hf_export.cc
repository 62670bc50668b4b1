#include "core/engine/hf_export.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/hf_checkpoint.h"
#include "core/checkpoint/safetensors.h"
#include "core/model/family.h"
#include "core/model/model.h"
#include "core/precision/convert.h"

namespace dst {

namespace fs = std::filesystem;

namespace {

// One tensor as it goes into the files: its Hugging Face name, shape, bytes.
struct HfOutTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

TensorDType FileDType(const std::string &dtype) {
  return dtype == "bf16" ? TensorDType::kBF16
                         : dtype == "fp16" ? TensorDType::kF16 : TensorDType::kF32;
}

const char *TorchDType(const std::string &dtype) {
  return dtype == "bf16" ? "bfloat16" : dtype == "fp16" ? "float16" : "float32";
}

// `values` [numel] (dstrain's layout) as the file stores them.
Result<HfOutTensor> Convert(const ParamDecl &decl, const LoadedTensor &values, const ModelSpec &spec,
                            const std::string &dtype) {
  const HfTensorName hf = HfTensorOf(spec, decl.name);
  HfOutTensor out{hf.name, decl.global_shape, {}};
  const int64_t n = values.numel();
  std::vector<float> laid(values.f32(), values.f32() + n);
  if (hf.transposed) {  // [out, in] -> Conv1D's [in, out]
    const int64_t rows = decl.global_shape[0], cols = decl.global_shape[1];
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t i = 0; i < cols; ++i) laid[size_t(i * rows + o)] = values.f32()[o * cols + i];
    out.shape = {cols, rows};
  }
  if (dtype == "fp32") {
    out.bytes.resize(size_t(n) * sizeof(float));
    std::memcpy(out.bytes.data(), laid.data(), out.bytes.size());
    return out;
  }
  std::vector<uint16_t> half(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const float x = laid[size_t(k)];
    if (dtype == "fp16") {
      half[size_t(k)] = FloatToHalf(x);
      if (std::isfinite(x) && !std::isfinite(HalfToFloat(half[size_t(k)])))
        return InvalidArgument("exporting in fp16: tensor '" + hf.name + "' holds " +
                               std::to_string(x) +
                               ", beyond fp16's range (65504); export in bf16 or fp32");
    } else {
      half[size_t(k)] = FloatToBFloat16(x);
    }
  }
  out.bytes.resize(half.size() * sizeof(uint16_t));
  std::memcpy(out.bytes.data(), half.data(), out.bytes.size());
  return out;
}

Status WriteText(const fs::path &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text << "\n";
  out.flush();
  if (!out) return IoError("exporting: cannot write " + path.string());
  return Status::Ok();
}

// The shards: tensors in order, a new shard where the next tensor would pass
// `max_bytes` (a tensor larger than that alone in its shard), as
// transformers' save_pretrained cuts them.
std::vector<std::vector<const HfOutTensor *>> Shards(const std::vector<HfOutTensor> &tensors,
                                                     int64_t max_bytes) {
  std::vector<std::vector<const HfOutTensor *>> shards(1);
  int64_t size = 0;
  for (const HfOutTensor &t : tensors) {
    const int64_t bytes = int64_t(t.bytes.size());
    if (!shards.back().empty() && size + bytes > max_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(&t);
    size += bytes;
  }
  return shards;
}

Status WriteDirectory(const fs::path &dir, const std::vector<HfOutTensor> &tensors,
                      const std::string &dtype, int64_t max_shard_bytes, const ModelSpec &spec) {
  const TensorDType file_dtype = FileDType(dtype);
  const auto shards = Shards(tensors, max_shard_bytes);
  spec_json::Json weight_map = spec_json::Json::object();
  int64_t total = 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    const std::string file = shards.size() == 1 ? std::string(kHfWeightsFile) : std::string(name);
    std::vector<TensorRef> refs;
    for (const HfOutTensor *t : shards[k]) {
      refs.push_back({t->name, file_dtype, t->shape, t->bytes.data()});
      weight_map[t->name] = file;
      total += int64_t(t->bytes.size());
    }
    DST_RETURN_IF_ERROR(WriteSafetensors((dir / file).string(), refs, {{"format", "pt"}}));
  }
  if (shards.size() > 1)
    DST_RETURN_IF_ERROR(WriteText(
        dir / "model.safetensors.index.json",
        spec_json::Json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2)));
  const spec_json::Json config = HfConfigOf(spec, TorchDType(dtype));
  DST_RETURN_IF_ERROR(WriteText(dir / "config.json", config.dump(2)));
  spec_json::Json generation = {{"_from_model_config", true}};
  for (const char *id : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(id)) generation[id] = config.at(id);
  return WriteText(dir / "generation_config.json", generation.dump(2));
}

}  // namespace

Result<int64_t> ParseShardSize(const std::string &text) {
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
    ++end;
  std::string unit = text.substr(end);
  for (char &c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, double> kUnits = {
      {"", 1},         {"B", 1},        {"KB", 1e3},           {"MB", 1e6},
      {"GB", 1e9},     {"TB", 1e12},    {"KIB", 1024.0},       {"MIB", 1048576.0},
      {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  double value = 0;
  try {
    value = end > 0 ? std::stod(text.substr(0, end)) : 0;
  } catch (...) {
    value = 0;
  }
  auto it = kUnits.find(unit);
  if (end == 0 || it == kUnits.end() || !(value * it->second >= 1))
    return InvalidArgument("shard size \"" + text +
                           "\": expected a positive size like 5GB, 500MB, 2GiB or a byte count");
  return int64_t(value * it->second);
}

Status ExportHfCheckpoint(const std::string &dir, const std::string &tag,
                          const std::string &out_dir, const HfExportOptions &options) {
  if (options.dtype != "fp32" && options.dtype != "bf16" && options.dtype != "fp16")
    return InvalidArgument("exporting: dtype \"" + options.dtype + "\": expected fp32, bf16 or fp16");
  if (options.max_shard_bytes < 1)
    return InvalidArgument("exporting: the shard size must be at least 1 byte");
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    return InvalidArgument("exporting: " + out_dir +
                           " exists and is not an empty directory; name a new one");
  Result<LoadedCheckpoint> ckpt = ReadCheckpointMeta(dir, tag);
  DST_RETURN_IF_ERROR(ckpt.status());
  Result<ModelSpec> spec = ParseModelSpec(ckpt->meta.at("model_spec").dump());
  if (!spec.ok())
    return CheckpointError(ckpt->path + "/meta.json: its model_spec does not parse (" +
                           spec.status().message() + ")");
  if (!spec->IsLanguageModel())
    return NotSupported("exporting " + ckpt->path +
                        " for Hugging Face: a sequential model has no Hugging Face form; "
                        "export its weights as one safetensors file (--format safetensors)");
  DST_RETURN_IF_ERROR(LoadCheckpointFile(&ckpt.value(), kModelFile));
  const SafetensorsFile &weights = ckpt->files.at(kModelFile);
  std::vector<HfOutTensor> tensors;
  for (const ParamDecl &d : DeclareParameters(spec.value())) {
    auto it = weights.tensors.find(d.name);
    if (it == weights.tensors.end() || it->second.dtype != TensorDType::kF32 ||
        it->second.shape != d.global_shape)
      return CheckpointError(ckpt->path + "/" + kModelFile + " has no F32 tensor '" + d.name +
                             "' of the model its meta.json names");
    Result<HfOutTensor> t = Convert(d, it->second, spec.value(), options.dtype);
    DST_RETURN_IF_ERROR(t.status());
    tensors.push_back(std::move(t).value());
  }
  const fs::path target = fs::absolute(out_dir, ec);
  const fs::path staging = target.string() + ".partial";
  fs::remove_all(staging, ec);
  if (!fs::create_directories(staging, ec) || ec)
    return IoError("exporting: cannot create " + staging.string() + ": " + ec.message());
  Status st = WriteDirectory(staging, tensors, options.dtype, options.max_shard_bytes, spec.value());
  if (st.ok()) {
    fs::remove(target, ec);  // an empty directory, or nothing
    fs::rename(staging, target, ec);
    if (ec) st = IoError("exporting: cannot rename " + staging.string() + " to " +
                         target.string() + ": " + ec.message());
  }
  if (!st.ok()) fs::remove_all(staging, ec);
  return st;
}

}  // namespace dst
