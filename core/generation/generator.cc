#include "core/generation/generator.h"

#include <filesystem>
#include <fstream>

#include "core/checkpoint/checkpoint.h"
#include "core/kernels/cpu/gemm.h"
#include "core/layers/tp_tensors.h"
#include "core/model/hf_weights.h"
#include "core/model/spec_json.h"
#include "core/precision/convert.h"
#include "core/runtime/threads.h"

namespace dst {

namespace {

// A model's end-of-sequence ids: eos_token_id (one id or a list, as LLaMA 3
// writes it) of its config, or of a Hugging Face directory's
// generation_config.json, which transformers' generate() reads first.
void AddEosIds(const spec_json::Json &config, std::set<int32_t> *eos) {
  if (!config.is_object() || !config.contains("eos_token_id")) return;
  const spec_json::Json &id = config.at("eos_token_id");
  if (id.is_number_integer()) eos->insert(id.get<int32_t>());
  if (id.is_array())
    for (const spec_json::Json &e : id)
      if (e.is_number_integer()) eos->insert(e.get<int32_t>());
}

std::set<int32_t> EosIds(const ModelSpec &spec) {
  std::set<int32_t> eos;
  if (!spec.hf_dir.empty()) {
    std::ifstream in(std::filesystem::path(spec.hf_dir) / "generation_config.json");
    if (in) AddEosIds(spec_json::Json::parse(in, nullptr, false), &eos);
  }
  if (eos.empty()) AddEosIds(spec_json::Json::parse(spec.canonical_json, nullptr, false), &eos);
  return eos;
}

Result<ModelSpec> SpecOf(const GeneratorOptions &o) {
  if (o.checkpoint.empty() == o.model.empty())
    return InvalidArgument(
        "generation needs exactly one source of weights: a dstrain checkpoint (--load DIR) or a "
        "model (--model: a Hugging Face directory, or a model spec for its seeded weights)");
  if (!o.checkpoint.empty()) {
    Result<LoadedCheckpoint> ckpt = ReadCheckpointMeta(o.checkpoint, o.tag);
    DST_RETURN_IF_ERROR(ckpt.status());
    if (!ckpt->meta.contains("model_spec"))
      return CheckpointError(ckpt->path + "/meta.json has no model_spec");
    Result<ModelSpec> spec = ParseModelSpec(ckpt->meta.at("model_spec").dump());
    if (!spec.ok())
      return CheckpointError(ckpt->path + "/meta.json: its model_spec does not parse (" +
                             spec.status().message() + ")");
    return spec;
  }
  const bool path = o.model.find_first_not_of(" \t\r\n") != std::string::npos &&
                    o.model[o.model.find_first_not_of(" \t\r\n")] != '{';
  Result<std::string> text = ModelSpecText(path ? "" : o.model, path ? o.model : "");
  DST_RETURN_IF_ERROR(text.status());
  return ParseModelSpec(text.value());
}

}  // namespace

const char *StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kEos:
      return "eos";
    case StopReason::kContext:
      return "context";
    case StopReason::kCaller:
      return "caller";
    default:
      return "length";
  }
}

Result<std::unique_ptr<Generator>> Generator::Open(const GeneratorOptions &o) {
  if (o.precision != "fp32" && o.precision != "bf16")
    return InvalidArgument("generation precision \"" + o.precision + "\": expected fp32 or bf16");
  if (o.batch < 1)
    return InvalidArgument("generation batch " + std::to_string(o.batch) + ": expected >= 1");
  DST_RETURN_IF_ERROR(CheckThreadCount(o.threads));
  Result<ModelSpec> spec = SpecOf(o);
  DST_RETURN_IF_ERROR(spec.status());
  if (!spec->IsLanguageModel())
    return NotSupported(
        "generating from a sequential model: generation needs a language model "
        "(type gpt, llama, bloom or a Hugging Face directory)");
  const int64_t positions = spec->lm.n_ctx;
  if (o.context < 0 || o.context > positions)
    return InvalidArgument("generation context " + std::to_string(o.context) + ": the model has " +
                           std::to_string(positions) +
                           " positions (n_ctx / max_position_embeddings); ask for at most that");
  SetNumThreads(ResolveNumThreads(o.threads));
  std::unique_ptr<Generator> g(new Generator());
  g->context_ = o.context > 0 ? o.context : positions;
  g->batch_ = o.batch;
  ActivationLimits limits;
  limits.max_B = g->batch_;
  limits.max_T = g->context_;
  limits.max_threads = MaxThreads();
  limits.attention_probabilities = false;  // every forward runs over the cache
  // Only each layer's output is kept (the next one's input); the rest of a
  // layer's tensors live in one region the layers share.
  ActivationOptions activations;
  activations.recompute = true;
  activations.recompute_interval = 1;
  try {
    g->model_ = std::make_unique<Model<float>>(spec.value(), limits, &g->tracker_,
                                               ParamStoreOptions{1, true, false}, activations);
    g->cache_ = std::make_unique<KvCache<float>>(g->model_->KvCacheWidths(), g->batch_, g->context_,
                                                 &g->tracker_);
  } catch (const std::bad_alloc &) {
    return Status(Code::kOutOfMemory,
                  "generation: the model, its activations for " + std::to_string(g->batch_) +
                      " x " + std::to_string(g->context_) +
                      " positions and its key/value cache do not fit in host memory; ask for a "
                      "shorter context or a smaller batch");
  }
  g->model_->SetKvCache(g->cache_.get());
  DST_RETURN_IF_ERROR(g->LoadWeights(o));
  if (o.precision == "bf16") {
    // bf16 weights, as a bf16-trained model's GEMMs see them: rounded, and
    // multiplied from their bf16 copies where the CPU computes in bf16.
    ParamStore<float> &p = g->model_->params();
    g->weights16_.resize(size_t(p.size()));
    FloatToBFloat16(p.values(), g->weights16_.data(), p.size());
    BFloat16ToFloat(g->weights16_.data(), p.values(), p.size());
    if (cpu::Bf16Compute().enabled) {
      g->model_->SetComputeType(ComputeType::kBf16);
      for (size_t id = 0; id < p.decls().size(); ++id)
        p.SetParamPointer(int(id), p.param(int(id)), g->weights16_.data() + p.decls()[id].offset);
    }
  }
  g->eos_ = EosIds(g->model_->spec());
  g->step_logits_.resize(size_t(g->batch_ * g->vocab()));
  return g;
}

Status Generator::LoadWeights(const GeneratorOptions &o) {
  ParamStore<float> &p = model_->params();
  const std::vector<ParamDecl> &decls = p.decls();
  std::vector<float> slice;
  // A whole tensor into its parameter (the vocabulary's padding rows at 0).
  const auto put = [&](size_t id, const float *whole) {
    const ParamDecl &d = decls[id];
    if (d.split.sliced()) {
      slice.resize(size_t(d.numel));
      SliceTensor(d, whole, slice.data());
      whole = slice.data();
    }
    std::copy(whole, whole + d.numel, p.param(int(id)));
  };
  if (!o.checkpoint.empty()) {
    Result<LoadedCheckpoint> ckpt = ReadCheckpointMeta(o.checkpoint, o.tag);
    DST_RETURN_IF_ERROR(ckpt.status());
    DST_RETURN_IF_ERROR(LoadCheckpointFile(&ckpt.value(), kModelFile));
    const SafetensorsFile &weights = ckpt->files.at(kModelFile);
    for (size_t id = 0; id < decls.size(); ++id) {
      const ParamDecl &d = decls[id];
      auto it = weights.tensors.find(d.name);
      if (it == weights.tensors.end() || it->second.dtype != TensorDType::kF32 ||
          it->second.shape != d.global_shape)
        return CheckpointError(ckpt->path + "/" + kModelFile + " has no F32 tensor '" + d.name +
                               "' of the model its meta.json names");
      put(id, it->second.f32());
    }
    return Status::Ok();
  }
  const ModelSpec &spec = model_->spec();
  if (spec.hf_dir.empty()) return Status::Ok();  // a spec: its seeded initial weights
  Result<HfWeights> hf = HfWeights::Open(spec.hf_dir, spec, DeclareParameters(spec));
  DST_RETURN_IF_ERROR(hf.status());
  std::vector<float> whole;
  for (size_t id = 0; id < decls.size(); ++id) {
    DST_RETURN_IF_ERROR(hf->ReadWhole(decls[id].name, &whole));
    put(id, whole.data());
  }
  return Status::Ok();
}

Status Generator::CheckTokens(const int32_t *tokens, int64_t n, const char *what) const {
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab())
      return InvalidArgument(std::string(what) + " token " + std::to_string(i) + " is " +
                             std::to_string(tokens[i]) + ", outside the model's vocabulary [0, " +
                             std::to_string(vocab()) + ")");
  return Status::Ok();
}

Status Generator::Forward(const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T,
                          float *logits, bool last_only, double *loss) {
  if (cache_->length() + T > context_)
    return InvalidArgument("generation: " + std::to_string(cache_->length() + T) +
                           " positions do not fit the context of " + std::to_string(context_));
  MicroBatch<float> mb;
  mb.B = B;
  mb.seq = T;
  mb.tokens = tokens;
  mb.targets = targets;
  mb.backward_follows = false;
  mb.logits = logits;
  mb.last_logits_only = last_only;
  Result<double> l = model_->Forward(mb);
  DST_RETURN_IF_ERROR(l.status());
  cache_->Advance(T);
  if (loss) *loss = l.value();
  return Status::Ok();
}

Status Generator::Logits(const int32_t *tokens, int64_t B, int64_t T, float *logits) {
  if (B < 1 || B > batch_ || T < 1 || T > context_)
    return InvalidArgument("logits of " + std::to_string(B) + " x " + std::to_string(T) +
                           " tokens: expected 1..." + std::to_string(batch_) +
                           " sequences (the generator's batch) of 1..." + std::to_string(context_) +
                           " tokens (its context)");
  DST_RETURN_IF_ERROR(CheckTokens(tokens, B * T, "logits:"));
  cache_->Clear();
  return Forward(tokens, nullptr, B, T, logits, false);
}

Result<double> Generator::Loss(const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T,
                               int64_t *counted) {
  if (B < 1 || B > batch_ || T < 1 || T > context_)
    return InvalidArgument("loss of " + std::to_string(B) + " x " + std::to_string(T) +
                           " tokens: expected 1..." + std::to_string(batch_) +
                           " sequences of 1..." + std::to_string(context_) + " tokens");
  DST_RETURN_IF_ERROR(CheckTokens(tokens, B * T, "loss:"));
  for (int64_t i = 0; i < B * T; ++i)
    if (targets[i] < -1 || targets[i] >= vocab())
      return InvalidArgument("loss: target " + std::to_string(i) + " is " +
                             std::to_string(targets[i]) + ", outside [0, " +
                             std::to_string(vocab()) + ") and not -1 (ignored)");
  cache_->Clear();
  double loss = 0;
  DST_RETURN_IF_ERROR(Forward(tokens, targets, B, T, nullptr, false, &loss));
  if (counted) {
    int64_t n = 0;
    for (int64_t i = 0; i < B * T; ++i) n += targets[i] >= 0;
    *counted = n;
  }
  return loss;
}

Result<Generated> Generator::Generate(const std::vector<int32_t> &prompt,
                                      const GenerateOptions &options,
                                      const std::function<bool(int32_t)> &on_token) {
  DST_RETURN_IF_ERROR(CheckSampling(options.sampling));
  if (options.max_new_tokens < 0)
    return InvalidArgument("max_new_tokens " + std::to_string(options.max_new_tokens) +
                           ": expected >= 0");
  const int64_t n = int64_t(prompt.size());
  if (n < 1) return InvalidArgument("generation needs a prompt of at least one token");
  if (n >= context_)
    return InvalidArgument("the prompt has " + std::to_string(n) + " tokens; the context holds " +
                           std::to_string(context_) +
                           ": shorten it or open the generator with a longer context");
  DST_RETURN_IF_ERROR(CheckTokens(prompt.data(), n, "prompt"));
  Sampler sampler(options.sampling);
  Generated out;
  std::vector<int32_t> sequence = prompt;  // uncached: the whole sequence each step
  float *logits = step_logits_.data();
  cache_->Clear();
  for (int64_t step = 0;; ++step) {
    if (step == options.max_new_tokens) {
      out.stop = StopReason::kLength;
      break;
    }
    if (int64_t(sequence.size()) >= context_) {  // prompt + new tokens fill the context
      out.stop = StopReason::kContext;
      break;
    }
    if (options.use_cache) {  // the prompt once, then the last token
      const int64_t from = cache_->length();
      DST_RETURN_IF_ERROR(Forward(sequence.data() + from, nullptr, 1,
                                  int64_t(sequence.size()) - from, logits, true));
    } else {
      cache_->Clear();
      DST_RETURN_IF_ERROR(
          Forward(sequence.data(), nullptr, 1, int64_t(sequence.size()), logits, true));
    }
    const int32_t token = sampler.Next(logits, vocab(), uint64_t(step));
    out.tokens.push_back(token);
    sequence.push_back(token);
    if (on_token && !on_token(token)) {
      out.stop = StopReason::kCaller;
      break;
    }
    if (options.stop_at_eos && eos_.count(token)) {
      out.stop = StopReason::kEos;
      break;
    }
  }
  return out;
}

}  // namespace dst
