// Engine <-> checkpoint files: what a dstrain checkpoint holds and how a load
// is validated before anything in the engine changes.
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint.h"
#include "core/engine/engine.h"

namespace dst {

namespace {

constexpr const char *kModelFile = "model.safetensors";
constexpr const char *kOptimizerFile = "optimizer.safetensors";

std::string StateTensorName(const std::string &state, const std::string &param) {
  return state + "/" + param;
}

std::string ShapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Checks that `file` holds exactly the engine's tensors with the same shapes.
Status MatchTensors(const SafetensorsFile &file, const std::vector<ParamDecl> &decls,
                    const std::string &prefix, const std::string &where) {
  for (const ParamDecl &d : decls) {
    const std::string name = prefix.empty() ? d.name : StateTensorName(prefix, d.name);
    auto it = file.tensors.find(name);
    if (it == file.tensors.end())
      return CheckpointError(where + " has no tensor \"" + name +
                             "\" that this model needs: the checkpoint was saved from a different "
                             "model spec");
    if (it->second.shape != d.shape || it->second.dtype != TensorDType::kF32)
      return CheckpointError(where + ": tensor \"" + name + "\" has shape " +
                             ShapeText(it->second.shape) + " but this model's is " +
                             ShapeText(d.shape) +
                             ": the checkpoint was saved from a different model spec");
  }
  if (file.tensors.size() != decls.size())
    for (const auto &[name, tensor] : file.tensors) {
      bool known = false;
      for (const ParamDecl &d : decls)
        known |= (prefix.empty() ? d.name : StateTensorName(prefix, d.name)) == name;
      if (!known)
        return CheckpointError(where + " has a tensor \"" + name +
                               "\" that this model does not: the checkpoint was saved from a "
                               "different model spec");
    }
  return Status::Ok();
}

}  // namespace

Status Engine::SaveCheckpoint(const std::string &dir, const std::string &tag,
                              const std::string &client_state_json) {
  using Json = nlohmann::json;
  Json client = nullptr;
  if (!client_state_json.empty()) {
    try {
      client = Json::parse(client_state_json);
    } catch (const Json::exception &e) {
      return InvalidArgument(std::string("save_checkpoint: client_state is not valid JSON: ") +
                             e.what());
    }
  }
  if (dp_comm_->size() > 1 && dp_->stage() >= 1)
    return NotSupported("save_checkpoint: saving partitioned (ZeRO stage " +
                        std::to_string(dp_->stage()) + ") state from " +
                        std::to_string(dp_comm_->size()) +
                        " ranks is not supported yet; use zero_optimization.stage 0 to save");
  const std::vector<ParamDecl> &decls = model_->params().decls();
  const float *values = dp_->FullParams();  // every stage holds them all on one rank
  CheckpointFile weights{kModelFile, {}, {{"format", "pt"}}};
  for (const ParamDecl &d : decls)
    weights.tensors.push_back({d.name, TensorDType::kF32, d.shape, values + d.offset});
  CheckpointFile optim{kOptimizerFile, {}, {}};
  std::vector<OptimizerStateBuffer> states = dp_->optimizer().StateBuffers();
  for (const OptimizerStateBuffer &s : states)
    for (const ParamDecl &d : decls)
      optim.tensors.push_back(
          {StateTensorName(s.name, d.name), TensorDType::kF32, d.shape, s.data + d.offset});

  Json meta = {
      {"dstrain_version", DSTRAIN_VERSION_STRING},
      {"step", steps_},
      {"optimizer",
       {{"type", dp_->optimizer().Name()}, {"steps_taken", dp_->optimizer().steps_taken()}}},
      {"lr_scheduler", {{"iteration", steps_}, {"next_lr", NextLearningRate()}}},
      {"rng", {{"model_seed", model_->spec().seed}, {"runtime_seed", config_.runtime.seed}}},
      {"model_spec", Json::parse(model_->spec().canonical_json)},
      {"config", Json::parse(config_.resolved_json)},
      {"client_state", client},
  };
  meta["topology"] = {{"world_size", env_.world_size},
                      {"dp_size", dp_comm_->size()},
                      {"tp_size", 1},
                      {"pp_size", 1},
                      {"zero_stage", dp_->stage()}};
  if (dp_comm_->size() == 1) return WriteCheckpoint(dir, tag, {weights, optim}, meta);
  // Stage 0: every rank holds the same state; rank 0 writes it, and every rank
  // learns whether that worked, so no rank goes on believing it saved.
  Status st = env_.rank == 0 ? WriteCheckpoint(dir, tag, {weights, optim}, meta) : Status::Ok();
  Result<double> failed = dp_->Average(st.ok() ? 0.0 : 1.0);
  if (!failed.ok()) return failed.status();
  if (!st.ok()) return st;
  if (failed.value() > 0)
    return IoError("save_checkpoint: rank 0 could not write " + dir + "/" + tag +
                   "; see rank 0's error");
  return Status::Ok();
}

Status Engine::LoadCheckpoint(const std::string &dir, const std::string &tag,
                              std::string *client_state_json) {
  if (dp_comm_->size() > 1 && dp_->stage() >= 1)
    return NotSupported("load_checkpoint: loading into partitioned (ZeRO stage " +
                        std::to_string(dp_->stage()) + ") state on " +
                        std::to_string(dp_comm_->size()) +
                        " ranks is not supported yet; load with zero_optimization.stage 0");
  Result<LoadedCheckpoint> loaded = ReadCheckpoint(dir, tag);
  if (!loaded.ok()) return loaded.status();
  const LoadedCheckpoint &ckpt = loaded.value();
  const std::vector<ParamDecl> &decls = model_->params().decls();
  const std::string where = ckpt.path;

  // Validate everything before changing anything.
  auto weights = ckpt.files.find(kModelFile);
  auto optim = ckpt.files.find(kOptimizerFile);
  if (weights == ckpt.files.end() || optim == ckpt.files.end())
    return CheckpointError(where + " lacks " + kModelFile + " or " + kOptimizerFile);
  DST_RETURN_IF_ERROR(MatchTensors(weights->second, decls, "", where + "/" + kModelFile));
  const std::string saved_optimizer = ckpt.meta.at("optimizer").value("type", "");
  if (saved_optimizer != dp_->optimizer().Name())
    return CheckpointError(where + " holds " + saved_optimizer +
                           " optimizer state but this config uses " + dp_->optimizer().Name() +
                           "; load it with the same optimizer type");
  std::vector<OptimizerStateBuffer> states = dp_->optimizer().StateBuffers();
  size_t expected_tensors = 0;
  for (const OptimizerStateBuffer &s : states) {
    SafetensorsFile subset;
    for (const auto &[name, t] : optim->second.tensors)
      if (name.rfind(s.name + "/", 0) == 0) subset.tensors.emplace(name, t);
    DST_RETURN_IF_ERROR(MatchTensors(subset, decls, s.name, where + "/" + kOptimizerFile));
    expected_tensors += subset.tensors.size();
  }
  if (expected_tensors != optim->second.tensors.size())
    return CheckpointError(where + "/" + kOptimizerFile +
                           " holds optimizer state this config does not use (e.g. momentum "
                           "buffers with momentum 0); load it with the same optimizer settings");
  const int64_t step = ckpt.meta.value("step", int64_t(-1));
  const int64_t optimizer_steps = ckpt.meta.at("optimizer").value("steps_taken", int64_t(-1));
  if (step < 0 || optimizer_steps < 0)
    return CheckpointError(where + "/meta.json has no valid step count");

  // Commit.
  float *values = dp_->FullParams();
  for (const ParamDecl &d : decls)
    std::memcpy(values + d.offset, weights->second.tensors.at(d.name).f32(),
                size_t(d.numel) * sizeof(float));
  for (const OptimizerStateBuffer &s : states)
    for (const ParamDecl &d : decls)
      std::memcpy(s.data + d.offset,
                  optim->second.tensors.at(StateTensorName(s.name, d.name)).f32(),
                  size_t(d.numel) * sizeof(float));
  steps_ = step;
  dp_->optimizer().set_steps_taken(optimizer_steps);
  DST_RETURN_IF_ERROR(dp_->ParamsChanged());
  if (client_state_json)
    *client_state_json = ckpt.meta.value("client_state", nlohmann::json()).dump();
  return Status::Ok();
}

}  // namespace dst
