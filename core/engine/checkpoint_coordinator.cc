// Training state <-> checkpoint files. DIR/TAG (format 2) holds:
//   model.safetensors          consolidated fp32 weights, one tensor per parameter
//   zero_rank_<r>.safetensors  the flat pieces [begin, end) of the optimizer state
//                              (and, at ZeRO-3 across ranks, of the weights) that
//                              rank r held; at stage 0 rank 0 writes the whole state
//   own_state_rank_<r>.safetensors  rank r's own state (core/zero/own_state.h:
//                              compression residuals, 1-bit errors), by name;
//                              restored only by a load in the same layout
//   meta.json                  config, topology, step, optimizer, LR schedule, RNG,
//                              client state, "shards", every file's checksum
// Any layout (dp, tp, pp, ZeRO stage, precision) loads any checkpoint of the
// same model and optimizer: each rank fills the flat ranges it holds (its
// stage's tensors, its tp slices of them) from the pieces that overlap them
// (core/checkpoint/reshard.h). Save and load agree across ranks through the
// rendezvous store, never through collectives (core/engine/rank_reports.h):
// a rank that does not take part is named, and nothing is committed unless
// every rank succeeded.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/reshard.h"
#include "core/common/log.h"
#include "core/engine/checkpoint_coordinator.h"
#include "core/engine/rank_reports.h"
#include "core/layers/tp_tensors.h"

namespace dst {

namespace {

using Json = nlohmann::json;

constexpr const char *kParamsPiece = "params";  // weights in a shard file (ZeRO-3 across ranks)

std::string ShapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Where each tensor sits in a flat buffer; a tensor-parallel slice as its
// runs in the whole tensor.
std::vector<FlatTensor> FlatTensors(const std::vector<ParamDecl> &decls) {
  std::vector<FlatTensor> out;
  for (const ParamDecl &d : decls) {
    FlatTensor t(d.name, d.offset, d.numel);
    if (d.split.sliced()) {
      t.run = d.GlobalRun();
      for (int64_t i = 0; i < d.numel; i += t.run) t.run_starts.push_back(d.GlobalElement(i));
    }
    out.push_back(std::move(t));
  }
  return out;
}

// The real (unpadded) elements of a held range.
FlatRange RealPart(ShardInfo held, int64_t total) {
  return {std::min(held.offset, total), std::min(held.offset + held.size, total)};
}

// Checks that `file` holds exactly the model's tensors with the same shapes,
// naming the first tensor (in the model's order) that differs.
Status MatchTensors(const SafetensorsFile &file, const std::vector<ParamDecl> &decls,
                    const std::string &where) {
  for (const ParamDecl &d : decls) {
    auto it = file.tensors.find(d.name);
    if (it == file.tensors.end())
      return CheckpointError(where + " has no tensor \"" + d.name +
                             "\" that this model needs: the checkpoint was saved from a different "
                             "model spec");
    if (it->second.shape != d.shape || it->second.dtype != TensorDType::kF32)
      return CheckpointError(where + ": tensor \"" + d.name + "\" has shape " +
                             ShapeText(it->second.shape) + " (" + DTypeName(it->second.dtype) +
                             ") but this model's is " + ShapeText(d.shape) +
                             " (F32): the checkpoint was saved from a different model spec");
  }
  if (file.tensors.size() != decls.size())
    for (const auto &entry : file.tensors) {
      const std::string &name = entry.first;
      const bool known = std::any_of(decls.begin(), decls.end(),
                                     [&](const ParamDecl &d) { return d.name == name; });
      if (!known)
        return CheckpointError(where + " has a tensor \"" + name +
                               "\" that this model does not: the checkpoint was saved from a "
                               "different model spec");
    }
  return Status::Ok();
}

Json WrittenFileJson(const WrittenFile &f) {
  return {{"name", f.name}, {"bytes", f.bytes}, {"checksum", f.checksum}};
}

WrittenFile WrittenFileFrom(const Json &j) {
  return {j.at("name").get<std::string>(), j.at("bytes").get<uint64_t>(),
          j.at("checksum").get<std::string>()};
}

}  // namespace

CheckpointCoordinator::CheckpointCoordinator(TrainingStateView view)
    : view_(std::move(view)),
      map_(FlatTensors(*view_.decls),
           FlatTensors(view_.whole_decls ? *view_.whole_decls : *view_.decls)) {
  if (!view_.whole_decls) view_.whole_decls = view_.decls;
  if (view_.local_parameters == 0) view_.local_parameters = view_.num_parameters;
}

std::string CheckpointCoordinator::CheckpointKeyPrefix(const char *phase) const {
  return "__dstrain/ckpt/" + std::to_string(ops_) + "/" + phase + "/";
}

Json CheckpointCoordinator::CheckpointMeta(const Json &client) const {
  const std::vector<std::string> states = view_.dp->optimizer().state_names();
  Json meta = {
      {"dstrain_version", DSTRAIN_VERSION_STRING},
      {"step", view_.progress->steps},
      {"precision", DTypeName(view_.config->precision())},
      {"skipped_steps", view_.progress->skipped_steps},
      {"num_parameters", view_.num_parameters},
      {"optimizer",
       {{"type", view_.dp->optimizer().Name()},
        {"steps_taken", view_.dp->optimizer().steps_taken()},
        {"states", states}}},
      {"lr_scheduler",
       {{"iteration", view_.progress->lr_iteration()}, {"next_lr", view_.next_lr()}}},
      {"loss_scaler", view_.scaler->enabled() ? view_.scaler->ToJson() : Json()},
      {"rng", {{"model_seed", view_.spec->seed}, {"runtime_seed", view_.config->runtime.seed}}},
      {"model_spec", Json::parse(view_.spec->canonical_json)},
      {"config", Json::parse(view_.config->resolved_json)},
      {"client_state", client},
  };
  meta["topology"] = {{"world_size", view_.env.world_size},
                      {"dp_size", view_.config->dp_size},
                      {"tp_size", view_.config->tp_size},
                      {"pp_size", view_.pp_size},
                      {"zero_stage", view_.dp->stage()}};
  if (!view_.dp->OwnStateBuffers().empty()) meta["own_state_layout"] = OwnStateLayout();
  return meta;
}

Json CheckpointCoordinator::OwnStateLayout() const {
  const Json config = Json::parse(view_.config->resolved_json);
  return {{"world_size", view_.env.world_size},
          {"dp_size", view_.config->dp_size},
          {"tp_size", view_.config->tp_size},
          {"pp_size", view_.pp_size},
          {"zero_stage", view_.dp->stage()},
          {"precision", DTypeName(view_.config->precision())},
          {"optimizer", view_.dp->optimizer().Name()},
          {"gradient_compression", config.value("gradient_compression", Json())}};
}

Status CheckpointCoordinator::WriteOwnStateFile(const std::string &dir, const std::string &tag,
                                                std::vector<WrittenFile> *written,
                                                Json *own_states) {
  const OwnState own = view_.dp->OwnStateBuffers();
  if (own.empty()) return Status::Ok();
  const std::string name = "own_state_rank_" + std::to_string(view_.env.rank) + ".safetensors";
  CheckpointFile file{name, {}, {}};
  Json tensors = Json::object(), scalars = Json::object();
  for (const OwnStateBuffer &b : own.buffers) {
    if (!b.save) continue;
    file.tensors.push_back({b.name, TensorDType::kF32, {b.numel}, b.data});
    tensors[b.name] = b.numel;
  }
  for (const OwnScalar &s : own.scalars) scalars[s.name] = *s.value;  // round-trips exactly
  Result<WrittenFile> w = WriteStagedFile(dir, tag, file);
  if (!w.ok()) return w.status();
  written->push_back(w.value());
  own_states->push_back(
      {{"rank", view_.env.rank}, {"file", name}, {"tensors", tensors}, {"scalars", scalars}});
  return Status::Ok();
}

// This rank's files in the staging directory: the shard file with the state
// it alone holds (every rank at stages 1-3; rank 0 at stage 0, where the
// state is replicated) and, on rank 0 when it holds every weight, the
// consolidated model file.
Status CheckpointCoordinator::WriteOwnCheckpointFiles(const std::string &dir,
                                                      const std::string &tag,
                                                      std::vector<WrittenFile> *written,
                                                      Json *shards) {
  const std::vector<ParamDecl> &decls = *view_.decls;
  ShardInfo params_held;
  const float *params = view_.dp->LocalParams(&params_held);
  const bool full_params = HoldsEveryWeight();
  if (view_.env.rank == 0 && full_params) {
    CheckpointFile weights{kModelFile, {}, {{"format", "pt"}}};
    std::vector<std::vector<float>> unpadded;  // padded tensors without their padding rows
    unpadded.reserve(decls.size());
    for (const ParamDecl &d : decls) {
      const float *data = params + d.offset;
      if (d.split.sliced()) {
        unpadded.emplace_back(size_t(d.GlobalNumel()));
        for (int64_t i = 0; i < d.numel; ++i)
          if (const int64_t g = d.GlobalElement(i); g >= 0) unpadded.back()[size_t(g)] = data[i];
        data = unpadded.back().data();
      }
      weights.tensors.push_back({d.name, TensorDType::kF32, d.global_shape, data});
    }
    Result<WrittenFile> w = WriteStagedFile(dir, tag, weights);
    if (!w.ok()) return w.status();
    written->push_back(w.value());
  }
  const ShardInfo held = view_.dp->StateRange();
  const FlatRange mine = RealPart(held, view_.local_parameters);
  const bool unique_state = view_.dp->stage() >= 1 || view_.dp_rank == 0;
  // The checkpoint's flat state this rank writes: its state range, as pieces
  // of the whole model's flat state (one piece without a pipeline).
  const std::vector<FlatMap::Segment> segments = map_.Cut(mine, view_.not_saved);
  if (!unique_state || segments.empty()) return Status::Ok();
  std::vector<FlatRange> pieces;
  int64_t count = 0;
  for (const FlatMap::Segment &seg : segments) {
    pieces.push_back(seg.whole);
    count += seg.whole.size();
  }
  const FlatRange hull{pieces.front().begin, pieces.back().end};
  const std::string name = ShardFileName(view_.env.rank);
  CheckpointFile shard{
      name, {}, {{"begin", std::to_string(hull.begin)}, {"end", std::to_string(hull.end)}}};
  if (pieces.size() > 1) shard.metadata["pieces"] = PiecesText(pieces);
  Json tensors = Json::array();
  // The optimizer's state, read through its store a segment at a time: in
  // place when it is resident and one segment, else copied out for the write.
  const Optimizer &optimizer = view_.dp->optimizer();
  const StateStore &store = optimizer.state();
  const std::vector<std::string> names = optimizer.state_names();
  std::vector<std::vector<float>> copies;
  auto gather = [&](const float *resident, size_t index, const float *base,
                    int64_t base_offset) -> Result<const float *> {
    if ((resident || base) && segments.size() == 1)
      return (resident ? resident : base) + (segments[0].local.begin - base_offset);
    copies.emplace_back(size_t(count));
    float *out = copies.back().data();
    for (const FlatMap::Segment &seg : segments) {
      const int64_t at = seg.local.begin - base_offset;
      if (resident || base)
        std::memcpy(out, (resident ? resident : base) + at, size_t(seg.local.size()) * 4);
      else
        DST_RETURN_IF_ERROR(store.Read(index, at, seg.local.size(), out));
      out += seg.local.size();
    }
    return static_cast<const float *>(copies.back().data());
  };
  for (size_t k = 0; k < names.size(); ++k) {
    const size_t index = optimizer.first_state_tensor() + k;
    Result<const float *> data = gather(store.Resident(index), index, nullptr, held.offset);
    if (!data.ok()) return data.status();
    shard.tensors.push_back({names[k], TensorDType::kF32, {count}, data.value()});
    tensors.push_back(names[k]);
  }
  if (!full_params) {
    Result<const float *> data = gather(nullptr, 0, params, params_held.offset);
    if (!data.ok()) return data.status();
    shard.tensors.push_back({kParamsPiece, TensorDType::kF32, {count}, data.value()});
    tensors.push_back(kParamsPiece);
  }
  Result<WrittenFile> w = WriteStagedFile(dir, tag, shard);
  if (!w.ok()) return w.status();
  written->push_back(w.value());
  Json entry = {{"file", name},
                {"rank", view_.env.rank},
                {"begin", hull.begin},
                {"end", hull.end},
                {"tensors", tensors}};
  if (pieces.size() > 1) {
    Json list = Json::array();
    for (const FlatRange &r : pieces) list.push_back({r.begin, r.end});
    entry["pieces"] = list;
  }
  // 1-bit LAMB's values of each tensor this rank holds, by name: a whole
  // tensor's (every slice and data-parallel rank keeps the same), so that a
  // load in another pipeline or tensor-parallel layout picks its own.
  if (const std::vector<float> values = optimizer.PerTensorScalars(); !values.empty()) {
    Json per_tensor = Json::object();
    for (size_t t = 0; t < decls.size(); ++t)
      per_tensor[decls[t].name] = {values[3 * t], values[3 * t + 1], values[3 * t + 2]};
    entry["per_tensor"] = per_tensor;
  }
  shards->push_back(entry);
  return Status::Ok();
}

namespace {

// The flat ranges a shard holds, in the order its tensors concatenate them:
// "pieces" when present (a pipeline stage's shard), else [begin, end).
std::vector<FlatRange> ShardPieces(const Json &s) {
  if (s.contains("pieces")) {
    std::vector<FlatRange> out;
    for (const Json &p : s.at("pieces"))
      out.push_back({p.at(0).get<int64_t>(), p.at(1).get<int64_t>()});
    return out;
  }
  return {{s.at("begin").get<int64_t>(), s.at("end").get<int64_t>()}};
}

// The pieces of one tensor of a shard file, its data cut along `ranges`.
void AddPieces(const std::vector<FlatRange> &ranges, const float *data, const std::string &file,
               std::vector<FlatPiece> *pieces) {
  for (const FlatRange &r : ranges) {
    pieces->push_back({r, data, file});
    data += r.size();
  }
}

}  // namespace

// Rank 0, ZeRO-3 across ranks, a pipeline, or weights held in a store
// (NVMe) rather than memory: model.safetensors from the weight pieces in
// every rank's shard file.
Result<WrittenFile> CheckpointCoordinator::ConsolidateWeights(const std::string &dir,
                                                              const std::string &tag,
                                                              const Json &shards) {
  const std::vector<ParamDecl> &decls = *view_.whole_decls;
  const int64_t total = view_.num_parameters;
  std::vector<SafetensorsFile> files;
  std::vector<FlatPiece> pieces;
  files.reserve(shards.size());
  for (const Json &s : shards) {
    const std::string name = s.at("file").get<std::string>();
    const std::string path = (std::filesystem::path(StagingPath(dir, tag)) / name).string();
    Result<SafetensorsFile> file = ReadSafetensors(path);
    if (!file.ok()) return file.status();
    files.push_back(std::move(file).value());
    AddPieces(ShardPieces(s), files.back().tensors.at(kParamsPiece).f32(), name, &pieces);
  }
  std::vector<float> flat(static_cast<size_t>(total));
  DST_RETURN_IF_ERROR(AssembleFlat(pieces, {0, total}, total, "weight", flat.data()));
  CheckpointFile weights{kModelFile, {}, {{"format", "pt"}}};
  for (const ParamDecl &d : decls)
    weights.tensors.push_back({d.name, TensorDType::kF32, d.shape, flat.data() + d.offset});
  return WriteStagedFile(dir, tag, weights);
}

// Rank 0, when it does not hold every whole weight itself: model.safetensors
// consolidated from the shards and added to `files` (the staging is
// aborted on a failure).
Status CheckpointCoordinator::AddConsolidatedWeights(const std::string &dir, const std::string &tag,
                                                     const Json &shards,
                                                     std::vector<WrittenFile> *files) {
  if (HoldsEveryWeight()) return Status::Ok();
  Result<WrittenFile> weights = ConsolidateWeights(dir, tag, shards);
  if (!weights.ok()) {
    AbortStaging(dir, tag);
    Status failed = weights.status();
    return failed.context("save_checkpoint: consolidating the weights");
  }
  files->push_back(weights.value());
  return Status::Ok();
}

// Rank 0 writes model.safetensors itself when it holds every whole weight;
// otherwise it consolidates the weight pieces every rank's shard file holds.
bool CheckpointCoordinator::HoldsEveryWeight() const {
  return view_.dp->FullParams() != nullptr && view_.pp_size == 1 && view_.config->tp_size == 1;
}

Status CheckpointCoordinator::Save(const std::string &dir, const std::string &tag,
                                   const std::string &client_state_json) {
  Json client = nullptr;
  if (!client_state_json.empty()) {
    client = Json::parse(client_state_json, nullptr, /*allow_exceptions=*/false);
    if (client.is_discarded())
      return InvalidArgument("save_checkpoint: client_state is not valid JSON");
  }
  DST_RETURN_IF_ERROR(ValidateTag(tag).context("save_checkpoint"));
  ++ops_;
  const bool multi = view_.store != nullptr;
  const auto timeout = view_.comm_timeout;
  const std::string what = "save_checkpoint(\"" + dir + "\", \"" + tag + "\")";
  DST_LOG(kDebug, "checkpoint", what + ": writing this rank's files");

  // 1. Rank 0 makes a fresh staging directory; the others wait for it.
  if (view_.env.rank == 0) {
    Status st = PrepareStaging(dir, tag);
    if (multi)
      DST_RETURN_IF_ERROR(PostReport(*view_.store, CheckpointKeyPrefix("prepared"), {0, st, {}}));
    if (!st.ok()) return st.context("save_checkpoint");
  } else {
    auto prepared = ReadReports(*view_.store, CheckpointKeyPrefix("prepared"), {0}, timeout, what);
    if (!prepared.ok()) return prepared.status();
    DST_RETURN_IF_ERROR(FirstFailure(prepared.value()).context("save_checkpoint"));
  }

  // 2. Every rank writes (and fsyncs) its own files.
  std::vector<WrittenFile> written;
  Json shards = Json::array(), own_states = Json::array();
  Status own = WriteOwnCheckpointFiles(dir, tag, &written, &shards);
  if (own.ok()) own = WriteOwnStateFile(dir, tag, &written, &own_states);
  Json meta = CheckpointMeta(client);
  if (!multi) {
    if (!own.ok()) {
      AbortStaging(dir, tag);
      return own;
    }
    // The weights are in the store (NVMe), not in memory: consolidated.
    DST_RETURN_IF_ERROR(AddConsolidatedWeights(dir, tag, shards, &written));
    meta["shards"] = shards;
    if (!own_states.empty()) meta["own_states"] = own_states;
    return CommitStaging(dir, tag, written, meta);
  }
  Json files = Json::array();
  for (const WrittenFile &f : written) files.push_back(WrittenFileJson(f));
  DST_RETURN_IF_ERROR(PostReport(
      *view_.store, CheckpointKeyPrefix("written"),
      {view_.env.rank, own, {{"files", files}, {"shards", shards}, {"own_states", own_states}}}));

  // 3. Rank 0 collects every rank's files, consolidates ZeRO-3 weights, and
  //    commits; the others learn the outcome.
  if (view_.env.rank != 0) {
    // Rank 0 may itself wait up to `timeout` for the slowest rank first.
    auto committed =
        ReadReports(*view_.store, CheckpointKeyPrefix("committed"), {0}, 2 * timeout, what);
    if (!own.ok()) return own.context("save_checkpoint");
    if (!committed.ok()) return committed.status();
    return FirstFailure(committed.value()).context("save_checkpoint");
  }
  Status outcome = CollectAndCommit(dir, tag, std::move(meta), what);
  DST_RETURN_IF_ERROR(PostReport(*view_.store, CheckpointKeyPrefix("committed"), {0, outcome, {}}));
  return outcome;
}

Status CheckpointCoordinator::CollectAndCommit(const std::string &dir, const std::string &tag,
                                               Json meta, const std::string &what) {
  DST_LOG(kDebug, "checkpoint", what + ": collecting every rank's written files to commit");
  std::vector<int64_t> ranks(size_t(view_.env.world_size));
  for (int64_t r = 0; r < view_.env.world_size; ++r) ranks[size_t(r)] = r;
  auto reports =
      ReadReports(*view_.store, CheckpointKeyPrefix("written"), ranks, view_.comm_timeout, what);
  Status st = reports.ok() ? FirstFailure(reports.value()) : reports.status();
  if (!st.ok()) {
    AbortStaging(dir, tag);
    return st.context("save_checkpoint (the previous checkpoint is unchanged)");
  }
  std::vector<WrittenFile> files;
  Json shards = Json::array(), own_states = Json::array();
  for (const RankReport &r : reports.value()) {
    for (const Json &f : r.payload.at("files")) files.push_back(WrittenFileFrom(f));
    for (const Json &s : r.payload.at("shards")) shards.push_back(s);
    for (const Json &s : r.payload.value("own_states", Json::array())) own_states.push_back(s);
  }
  DST_RETURN_IF_ERROR(AddConsolidatedWeights(dir, tag, shards, &files));
  meta["shards"] = shards;
  if (!own_states.empty()) meta["own_states"] = own_states;
  return CommitStaging(dir, tag, files, std::move(meta));
}

// ---------------------------------------------------------------- load

// Everything a load will write, validated and assembled before anything in
// the engine changes.
struct CheckpointCoordinator::PreparedLoad {
  std::vector<float> params;  // [params_range.size] this rank's weights
  ShardInfo params_range;
  std::vector<std::vector<float>> states;  // per optimizer state [state_range.size]
  ShardInfo state_range;
  int64_t step = 0, optimizer_steps = 0, skipped_steps = 0;
  std::vector<float> per_tensor;  // the optimizer's per-tensor values (1-bit LAMB)
  LossScaler scaler;              // this config's scaler with the saved state (fp16)
  Json client_state;
  // This rank's own state as saved, in OwnStateBuffers' order (an optional
  // buffer the checkpoint does not have: empty), when own_restore; else it
  // starts afresh (own_note: why, when the rank has any).
  bool own_restore = false;
  std::vector<std::vector<float>> own;
  std::vector<double> own_scalars;
  std::string own_note;
  explicit PreparedLoad(const LossScaler &current) : scaler(current) {}
};

// 1-bit LAMB's per-tensor values for this rank's tensors, by name from the
// shards (a checkpoint of an older layout: one flat list, rank 0's).
Status CheckpointCoordinator::ReadPerTensorScalars(const Json &meta, const std::string &where,
                                                   PreparedLoad *out) const {
  if (view_.dp->optimizer().PerTensorScalars().empty()) return Status::Ok();
  std::map<std::string, std::vector<float>> by_name;
  for (const Json &s : meta.at("shards"))
    if (s.contains("per_tensor"))
      for (const auto &[name, values] : s.at("per_tensor").items())
        by_name.emplace(name, values.get<std::vector<float>>());
  if (by_name.empty()) {
    const Json &optimizer = meta.at("optimizer");
    if (optimizer.contains("per_tensor"))
      out->per_tensor = optimizer.at("per_tensor").get<std::vector<float>>();
    return Status::Ok();
  }
  for (const ParamDecl &d : *view_.decls) {
    auto it = by_name.find(d.name);
    if (it == by_name.end() || it->second.size() != 3)
      return CheckpointError(where + "/meta.json holds no 1-bit LAMB values for tensor \"" +
                             d.name + "\": the checkpoint is incomplete");
    out->per_tensor.insert(out->per_tensor.end(), it->second.begin(), it->second.end());
  }
  return Status::Ok();
}

Status CheckpointCoordinator::PrepareLoad(const std::string &dir, const std::string &tag,
                                          PreparedLoad *out) {
  Result<LoadedCheckpoint> loaded = ReadCheckpointMeta(dir, tag);
  if (!loaded.ok()) return loaded.status();
  LoadedCheckpoint &ckpt = loaded.value();
  const std::string where = ckpt.path;
  const int64_t total = view_.num_parameters;
  try {
    // Weights: names and shapes (the first mismatching tensor is named).
    DST_RETURN_IF_ERROR(LoadCheckpointFile(&ckpt, kModelFile));
    const SafetensorsFile &weights = ckpt.files.at(kModelFile);
    DST_RETURN_IF_ERROR(MatchTensors(weights, *view_.whole_decls, where + "/" + kModelFile));
    // Then the model: a spec that computes differently with the same tensors
    // (n_head, say) is refused naming the field and both values.
    Result<ModelSpec> saved_spec = ParseModelSpec(ckpt.meta.at("model_spec").dump());
    if (!saved_spec.ok())
      return CheckpointError(where + "/meta.json: its model_spec does not parse (" +
                             saved_spec.status().message() + ")");
    const std::string differs = FirstComputationDifference(saved_spec.value(), *view_.spec);
    if (!differs.empty())
      return CheckpointError(where + " was saved from a different model (" + differs +
                             "); load it with the model spec it was saved with (dstrain ckpt "
                             "inspect shows it), or export its weights (dstrain ckpt export) "
                             "to start a different model from them");

    const Json &optimizer = ckpt.meta.at("optimizer");
    const std::string saved = optimizer.at("type").get<std::string>();
    if (saved != view_.dp->optimizer().Name())
      return CheckpointError(where + " holds " + saved + " optimizer state but this config uses " +
                             view_.dp->optimizer().Name() +
                             "; load it with the same optimizer type");
    const std::vector<std::string> names = view_.dp->optimizer().state_names();
    const auto saved_states = optimizer.at("states").get<std::vector<std::string>>();
    if (saved_states != names)
      return CheckpointError(where + " holds optimizer state [" + Json(saved_states).dump() +
                             "] but this config's " + view_.dp->optimizer().Name() + " keeps " +
                             Json(names).dump() +
                             " (e.g. momentum buffers with momentum 0); load it with the same "
                             "optimizer settings");
    out->step = ckpt.meta.at("step").get<int64_t>();
    out->optimizer_steps = optimizer.at("steps_taken").get<int64_t>();
    DST_RETURN_IF_ERROR(ReadPerTensorScalars(ckpt.meta, where, out));
    if (out->step < 0 || out->optimizer_steps < 0)
      return CheckpointError(where + "/meta.json has no valid step count");
    out->client_state = ckpt.meta.value("client_state", Json());
    out->skipped_steps = ckpt.meta.value("skipped_steps", int64_t(0));
    if (out->skipped_steps < 0 || out->skipped_steps > out->step)
      return CheckpointError(where + "/meta.json: skipped_steps " +
                             std::to_string(out->skipped_steps) + " is not in [0, step]");
    // A checkpoint saved without fp16 has no scaler state: fp16 starts from
    // the configured scale. Loading into fp32/bf16 drops it.
    DST_RETURN_IF_ERROR(out->scaler.FromJson(ckpt.meta.value("loss_scaler", Json())));

    // This rank's weights, from the consolidated tensors: the pieces of the
    // whole model's flat weights its range holds (padding stays 0).
    view_.dp->LocalParams(&out->params_range);
    out->params.assign(size_t(out->params_range.size), 0.0f);
    const std::vector<FlatTensor> whole = FlatTensors(*view_.whole_decls);
    for (const FlatMap::Segment &seg :
         map_.Cut(RealPart(out->params_range, view_.local_parameters)))
      CopyFlatFromTensors(weights, whole, seg.whole,
                          out->params.data() + (seg.local.begin - out->params_range.offset));

    // This rank's optimizer state, from the shard files that overlap it: its
    // range is one or more ranges of the checkpoint's flat state (a pipeline
    // stage's tensors; a tied copy takes the first copy's state).
    out->state_range = view_.dp->StateRange();
    const FlatRange want{out->state_range.offset, out->state_range.offset + out->state_range.size};
    const std::vector<FlatMap::Segment> segments =
        map_.Cut(RealPart(out->state_range, view_.local_parameters));
    std::vector<std::vector<FlatPiece>> pieces(names.size());
    for (const Json &s : ckpt.meta.at("shards")) {
      const FlatRange range{s.at("begin").get<int64_t>(), s.at("end").get<int64_t>()};
      const bool overlaps = std::any_of(segments.begin(), segments.end(), [&](const auto &seg) {
        return range.end > seg.whole.begin && range.begin < seg.whole.end;
      });
      if (!overlaps) continue;
      const std::string file = s.at("file").get<std::string>();
      DST_RETURN_IF_ERROR(LoadCheckpointFile(&ckpt, file));
      const SafetensorsFile &shard = ckpt.files.at(file);
      Result<FlatRange> declared = ShardFileRange(shard, where + "/" + file);
      if (!declared.ok()) return declared.status();
      if (declared->begin != range.begin || declared->end != range.end)
        return CheckpointError(
            where + "/" + file + " declares elements [" + std::to_string(declared->begin) + ", " +
            std::to_string(declared->end) + ") but meta.json says [" + std::to_string(range.begin) +
            ", " + std::to_string(range.end) + "): the checkpoint is inconsistent");
      const std::vector<FlatRange> ranges = ShardPieces(s);
      int64_t count = 0;
      for (const FlatRange &r : ranges) count += r.size();
      auto declared_pieces = shard.metadata.find("pieces");
      if (declared_pieces != shard.metadata.end()) {
        Result<std::vector<FlatRange>> parsed =
            ParsePieces(declared_pieces->second, where + "/" + file);
        if (!parsed.ok()) return parsed.status();
        if (PiecesText(parsed.value()) != PiecesText(ranges))
          return CheckpointError(where + "/" + file +
                                 " declares other pieces than meta.json: the checkpoint is "
                                 "inconsistent");
      }
      for (size_t k = 0; k < names.size(); ++k) {
        auto t = shard.tensors.find(names[k]);
        if (t == shard.tensors.end())
          return CheckpointError(where + "/" + file + " has no \"" + names[k] +
                                 "\" state: the checkpoint is incomplete");
        if (t->second.numel() != count)
          return CheckpointError(where + "/" + file + ": \"" + names[k] + "\" has " +
                                 std::to_string(t->second.numel()) + " elements but its pieces " +
                                 std::to_string(count) + ": the checkpoint is inconsistent");
        AddPieces(ranges, t->second.f32(), file, &pieces[k]);
      }
    }
    if (total > 0 && ckpt.meta.value("num_parameters", total) != total)
      return CheckpointError(where + " holds " + ckpt.meta["num_parameters"].dump() +
                             " parameters but this model has " + std::to_string(total));
    out->states.resize(names.size());
    for (size_t k = 0; k < names.size(); ++k) {
      out->states[k].assign(size_t(want.size()), 0.0f);  // padding stays 0
      for (const FlatMap::Segment &seg : segments)
        DST_RETURN_IF_ERROR(AssembleFlat(pieces[k], seg.whole, total, "\"" + names[k] + "\"",
                                         out->states[k].data() + (seg.local.begin - want.begin))
                                .context(where));
    }
    DST_RETURN_IF_ERROR(PrepareOwnState(&ckpt, out));
  } catch (const Json::exception &e) {
    return CheckpointError(where + "/meta.json is missing fields or has wrong types (" + e.what() +
                           ")");
  }
  return Status::Ok();
}

Status CheckpointCoordinator::PrepareOwnState(LoadedCheckpoint *ckpt, PreparedLoad *out) const {
  const OwnState mine = view_.dp->OwnStateBuffers();
  if (mine.empty()) return Status::Ok();
  const Json &meta = ckpt->meta;
  if (!meta.contains("own_states")) {
    out->own_note = "the checkpoint holds no per-rank state";
    return Status::Ok();
  }
  if (meta.value("own_state_layout", Json()) != OwnStateLayout()) {
    out->own_note =
        "the checkpoint was saved in another layout or with other compression "
        "settings";
    return Status::Ok();
  }
  const Json *entry = nullptr;
  for (const Json &e : meta.at("own_states"))
    if (e.at("rank").get<int64_t>() == view_.env.rank) entry = &e;
  const std::string where = ckpt->path + "/meta.json";
  if (entry == nullptr)
    return CheckpointError(where + " lists no own state of rank " + std::to_string(view_.env.rank) +
                           " although it was saved in this layout: the checkpoint is incomplete");
  // The same buffers (optional ones may be absent) and scalars, else afresh.
  const Json &tensors = entry->at("tensors");
  const Json scalars = entry->value("scalars", Json::object());
  Json expected = Json::object();
  size_t matched = 0;
  bool same = scalars.size() == mine.scalars.size();
  for (const OwnStateBuffer &b : mine.buffers) {
    expected[b.name] = b.numel;
    if (tensors.contains(b.name)) {
      ++matched;
      same = same && tensors.at(b.name) == b.numel;
    } else {
      same = same && b.optional;
    }
  }
  for (const OwnScalar &s : mine.scalars) same = same && scalars.contains(s.name);
  if (!same || matched != tensors.size()) {
    out->own_note = "its per-rank state has other buffers (" + tensors.dump() +
                    ") than this run's (" + expected.dump() + ")";
    return Status::Ok();
  }
  const std::string file = entry->at("file").get<std::string>();
  DST_RETURN_IF_ERROR(LoadCheckpointFile(ckpt, file));
  const SafetensorsFile &saved = ckpt->files.at(file);
  for (const OwnStateBuffer &b : mine.buffers) {
    out->own.emplace_back();
    if (!tensors.contains(b.name)) continue;  // optional, not saved then
    auto t = saved.tensors.find(b.name);
    if (t == saved.tensors.end() || t->second.dtype != TensorDType::kF32 ||
        t->second.numel() != b.numel)
      return CheckpointError(ckpt->path + "/" + file + " has no F32 \"" + b.name + "\" of " +
                             std::to_string(b.numel) +
                             " elements, which meta.json lists: the checkpoint is inconsistent");
    out->own.back().assign(t->second.f32(), t->second.f32() + b.numel);
  }
  for (const OwnScalar &s : mine.scalars) {
    if (!scalars.at(s.name).is_number())
      return CheckpointError(where + ": own state \"" + s.name + "\" of rank " +
                             std::to_string(view_.env.rank) + " is not a number");
    out->own_scalars.push_back(scalars.at(s.name).get<double>());
  }
  out->own_restore = true;
  return Status::Ok();
}

Status CheckpointCoordinator::Load(const std::string &dir, const std::string &tag,
                                   std::string *client_state_json) {
  ++ops_;
  PreparedLoad prepared(*view_.scaler);
  DST_LOG(kDebug, "checkpoint",
          "load(\"" + dir + "\", \"" + tag + "\"): validating this rank's part");
  Status st = PrepareLoad(dir, tag, &prepared);
  DST_LOG(
      kDebug, "checkpoint",
      "load: this rank's part " + std::string(st.ok() ? "is valid" : "failed: " + st.message()));
  if (view_.store) {
    // Every rank validated its part before any rank changes anything.
    DST_RETURN_IF_ERROR(
        PostReport(*view_.store, CheckpointKeyPrefix("validated"), {view_.env.rank, st, {}}));
    std::vector<int64_t> ranks(size_t(view_.env.world_size));
    for (int64_t r = 0; r < view_.env.world_size; ++r) ranks[size_t(r)] = r;
    auto reports = ReadReports(*view_.store, CheckpointKeyPrefix("validated"), ranks,
                               view_.comm_timeout, "load_checkpoint(\"" + dir + "\")");
    if (!st.ok()) return st.context("load_checkpoint");
    if (!reports.ok()) return reports.status();
    DST_RETURN_IF_ERROR(FirstFailure(reports.value())
                            .context("load_checkpoint: another rank could not load it; nothing "
                                     "was changed"));
  } else if (!st.ok()) {
    return st.context("load_checkpoint");
  }

  // Commit.
  ShardInfo held;
  float *params = view_.dp->LocalParams(&held);
  Optimizer &optimizer = view_.dp->optimizer();
  if (params)
    std::memcpy(params, prepared.params.data(), prepared.params.size() * sizeof(float));
  else  // the master weights live in the store (NVMe)
    DST_RETURN_IF_ERROR(
        optimizer.state().Write(0, 0, int64_t(prepared.params.size()), prepared.params.data()));
  for (size_t k = 0; k < prepared.states.size(); ++k)
    DST_RETURN_IF_ERROR(optimizer.state().Write(optimizer.first_state_tensor() + k, 0,
                                                int64_t(prepared.states[k].size()),
                                                prepared.states[k].data()));
  view_.progress->steps = prepared.step;
  view_.progress->skipped_steps = prepared.skipped_steps;
  *view_.scaler = prepared.scaler;
  view_.dp->optimizer().set_steps_taken(prepared.optimizer_steps);
  if (!view_.dp->optimizer().PerTensorScalars().empty())
    DST_RETURN_IF_ERROR(view_.dp->optimizer().SetPerTensorScalars(prepared.per_tensor));
  // A rank's own state (its weights too, between 0/1 Adam's synchronisations)
  // before the weights' derived copies are refreshed.
  if (!prepared.own_restore) {
    view_.dp->ResetOwnState();
    if (!prepared.own_note.empty())
      DST_LOG(kInfo, "checkpoint",
              "load: this rank's own state (compression residuals, 1-bit errors, update "
              "compression's moments, 0/1 Adam's local steps) starts afresh: " +
                  prepared.own_note);
  } else {
    const OwnState own = view_.dp->OwnStateBuffers();
    for (size_t i = 0; i < own.buffers.size(); ++i)
      if (!prepared.own[i].empty())
        std::memcpy(own.buffers[i].data, prepared.own[i].data(),
                    size_t(own.buffers[i].numel) * sizeof(float));
    for (size_t i = 0; i < own.scalars.size(); ++i) *own.scalars[i].value = prepared.own_scalars[i];
  }
  DST_RETURN_IF_ERROR(view_.dp->ParamsChanged());
  if (client_state_json) *client_state_json = prepared.client_state.dump();
  return Status::Ok();
}

Status CheckpointCoordinator::AgreeOnValidation(const Status &mine, const char *phase,
                                                const std::string &what,
                                                const std::string &context) {
  Status own = mine;
  if (!view_.store) return own.context(context);
  DST_RETURN_IF_ERROR(
      PostReport(*view_.store, CheckpointKeyPrefix(phase), {view_.env.rank, own, {}}));
  std::vector<int64_t> ranks(size_t(view_.env.world_size));
  for (int64_t r = 0; r < view_.env.world_size; ++r) ranks[size_t(r)] = r;
  auto reports =
      ReadReports(*view_.store, CheckpointKeyPrefix(phase), ranks, view_.comm_timeout, what);
  if (!own.ok()) return own.context(context);
  if (!reports.ok()) return reports.status();
  return FirstFailure(reports.value())
      .context(context + ": another rank could not read them; nothing was changed");
}

Status CheckpointCoordinator::LoadWeights(const std::string &dir, const std::string &tag) {
  ++ops_;
  const std::string what = "load_weights(\"" + dir + "\")";
  Result<LoadedCheckpoint> ckpt = ReadCheckpointMeta(dir, tag);
  Status st = ckpt.status();
  if (st.ok()) st = LoadCheckpointFile(&ckpt.value(), kModelFile);
  if (st.ok())
    st =
        MatchTensors(ckpt->files.at(kModelFile), *view_.whole_decls, ckpt->path + "/" + kModelFile);
  // every rank validated before any rank changes anything
  DST_RETURN_IF_ERROR(AgreeOnValidation(st, "weights", what, "load_weights"));
  const SafetensorsFile &weights = ckpt->files.at(kModelFile);
  const std::vector<ParamDecl> &decls = *view_.decls;
  std::vector<float> slice;
  for (size_t id = 0; id < decls.size(); ++id) {
    const float *whole = weights.tensors.at(decls[id].name).f32();
    if (decls[id].split.sliced()) {  // this tp rank's slice of the whole tensor
      slice.resize(size_t(decls[id].numel));
      SliceTensor(decls[id], whole, slice.data());
      whole = slice.data();
    }
    DST_RETURN_IF_ERROR(view_.dp->WriteParam(int(id), whole).context(what));
  }
  // WriteParam restarted 0/1 Adam's accumulated steps tensor by tensor; the
  // rest of a rank's own state (its learning-rate sum, the compression
  // residuals, the 1-bit errors) belonged to the weights just replaced too.
  // The optimizer's moments stay, as DeepSpeed's load_module_only keeps them.
  view_.dp->ResetOwnState();
  return Status::Ok();
}

}  // namespace dst
