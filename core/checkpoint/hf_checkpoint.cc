#include "core/checkpoint/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dst {

namespace fs = std::filesystem;

namespace {

Result<nlohmann::json> ReadIndex(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json index = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object())
    return CheckpointError(path + " is not a JSON object (the index of a sharded checkpoint)");
  if (!index.contains("weight_map") || !index.at("weight_map").is_object())
    return CheckpointError(path + " has no \"weight_map\" object (tensor name -> shard file)");
  for (const auto &[name, file] : index.at("weight_map").items())
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      return CheckpointError(path + ": \"weight_map\" gives tensor '" + name + "' the file " +
                             file.dump() + ", not a file name beside the index");
  return index;
}

}  // namespace

Result<HfCheckpoint> HfCheckpoint::Open(const std::string &dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return IoError("Hugging Face model directory " + dir + ": " +
                   (fs::exists(dir, ec) ? "not a directory" : "does not exist"));
  HfCheckpoint ckpt;
  ckpt.dir_ = dir;
  const fs::path root(dir);
  const fs::path index_path = root / kHfWeightsIndex, single = root / kHfWeightsFile;
  if (fs::exists(index_path, ec)) {
    Result<nlohmann::json> index = ReadIndex(index_path.string());
    DST_RETURN_IF_ERROR(index.status());
    std::map<std::string, size_t> file_of;  // shard name -> files_ index
    for (const auto &[name, value] : index.value().at("weight_map").items()) {
      const std::string file = value.get<std::string>();
      if (!file_of.count(file)) {
        Result<SafetensorsReader> reader = SafetensorsReader::Open((root / file).string());
        if (!reader.ok()) {
          Status failed = reader.status();
          return failed.context("shard " + file + " of " + index_path.string());
        }
        file_of[file] = ckpt.files_.size();
        ckpt.files_.push_back(std::move(reader).value());
      }
      const SafetensorsReader &reader = ckpt.files_[file_of[file]];
      const SafetensorsEntry *entry = reader.Find(name);
      if (entry == nullptr)
        return CheckpointError(index_path.string() + " puts tensor '" + name + "' in " + file +
                               ", which has no such tensor (a shard from another checkpoint?)");
      ckpt.tensors_[name] = {nullptr, entry};
    }
    // Pointers into files_ only once it stops growing.
    for (auto &[name, tensor] : ckpt.tensors_)
      tensor.file = &ckpt.files_[file_of[index.value().at("weight_map").at(name).get<std::string>()]];
    return ckpt;
  }
  if (!fs::exists(single, ec)) {
    for (const char *pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
      if (fs::exists(root / pickle, ec))
        return NotSupported(
            dir + " holds PyTorch pickle weights (" + pickle +
            "), which dstrain does not read (unpickling runs code); save them as safetensors "
            "first: python3 -c \"from transformers import AutoModelForCausalLM as M; "
            "M.from_pretrained('" + dir + "').save_pretrained('OUT', safe_serialization=True)\"");
    return CheckpointError(dir + " has neither " + kHfWeightsFile + " nor " + kHfWeightsIndex +
                           ": not a Hugging Face model directory with safetensors weights");
  }
  Result<SafetensorsReader> reader = SafetensorsReader::Open(single.string());
  DST_RETURN_IF_ERROR(reader.status());
  ckpt.files_.push_back(std::move(reader).value());
  for (const SafetensorsEntry &e : ckpt.files_[0].entries())
    ckpt.tensors_[e.name] = {&ckpt.files_[0], &e};
  return ckpt;
}

std::vector<std::string> HfCheckpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto &[name, t] : tensors_) names.push_back(name);
  return names;
}

HfCheckpoint::Tensor HfCheckpoint::Find(const std::string &name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? Tensor{} : it->second;
}

Status HfCheckpoint::ReadAll(const Tensor &t, void *out) const {
  return t.file->Read(*t.entry, 0, size_t(t.entry->end - t.entry->begin), out);
}

}  // namespace dst
