// A chain of layers run forward and backward outside a model, and a whole
// model, through a given kernel backend and with every tensor (parameters,
// gradients, activations, scratch, tokens, targets, inputs, labels) in a
// given memory: the kernel-seam tests (tests/unit/test_kernel_seam.cc:
// memory closed to the host) and the CUDA backend's tests (tests/gpu: device
// memory) run the same cases and compare them with the CPU backend on host
// memory.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/model/family.h"
#include "core/model/model.h"
#include "core/model/sequential_layers.h"
#include "core/runtime/memory.h"

namespace dst {

// Where a case's tensors live: one region handed out in pieces (TakeBytes:
// null when full), never freed piecemeal; as a MemoryResource it holds a
// model's buffers too.
class TensorMemory : public MemoryResource {
 public:
  virtual void *TakeBytes(size_t bytes) = 0;
  void *Allocate(size_t bytes) override {
    void *p = TakeBytes((bytes + 255) / 256 * 256);
    if (p) Zero(p, bytes);
    return p;
  }
  void Free(void *) override {}  // the whole region goes with the object
  template <typename T>
  T *Take(int64_t n) {
    return static_cast<T *>(TakeBytes((size_t(n) * sizeof(T) + 63) / 64 * 64));
  }
  template <typename T>
  T *TakeCopy(const std::vector<T> &host) {
    T *p = Take<T>(int64_t(host.size()));
    if (p) Upload(p, host.data(), host.size() * sizeof(T));
    return p;
  }
};

enum class ChainPass { kWhole, kZeroBubbleRecompute };

struct Chain {
  ParamRegistry registry;
  std::vector<std::unique_ptr<Layer<float>>> layers;
  std::unique_ptr<ParamStore<float>> store;
  int64_t B = 2, T = 8, in_width = 0;  // in_width: 0 for a GPT (tokens)
  int64_t classes = 0;                 // targets in [0, classes) (0: none)
  bool mse = false;                    // labels [B * T, width of the last layer's input]
  ComputeType compute = ComputeType::kFp32;
};

// Embedding, two decoder layers, head of a family (GPT-2 by default):
// vocabulary 32, context 8, 2 heads, d_model 16.
inline std::unique_ptr<Chain> TinyLanguageModel(const TransformerSpec &lm,
                                                DecoderFamily (*family)(const TransformerSpec &)) {
  auto chain = std::make_unique<Chain>();
  const DecoderFamily f = family(lm);
  auto embedding =
      std::make_unique<TokenEmbedding<float>>(f.embedding, f.embedding_names, chain->registry);
  const int wte = embedding->wte_id();
  chain->layers.push_back(std::move(embedding));
  for (int i = 0; i < lm.n_layer; ++i)
    chain->layers.push_back(
        std::make_unique<DecoderLayer<float>>(f.block, f.block_names(i), chain->registry));
  chain->layers.push_back(
      std::make_unique<LmHead<float>>(f.head, f.head_names, f.tied, wte, chain->registry));
  chain->classes = lm.vocab;
  return chain;
}

inline std::unique_ptr<Chain> TinyGpt() {
  TransformerSpec lm;
  lm.vocab = 32, lm.n_ctx = 8, lm.n_layer = 2, lm.n_head = 2, lm.d_model = 16;
  return TinyLanguageModel(lm, GptFamily);
}

// LLaMA: 4 query heads over 2 key/value heads, rotary embeddings with Llama
// 3.1's scaling, a SwiGLU MLP of 24 features, biases, the head untied.
inline std::unique_ptr<Chain> TinyLlama() {
  TransformerSpec lm;
  lm.vocab = 32, lm.n_ctx = 8, lm.n_layer = 2, lm.n_head = 4, lm.n_kv_head = 2, lm.d_model = 16;
  lm.ffn = 24, lm.norm_eps = 1e-5, lm.attention_bias = lm.mlp_bias = true;
  lm.tie_embeddings = false;
  lm.rope.theta = 100.0f, lm.rope.scaling = int32_t(math::RopeScaling::kLlama3);
  lm.rope.factor = 4.0f, lm.rope.original_max_position = 16.0f;
  return TinyLanguageModel(lm, LlamaFamily);
}

// BLOOM: ALiBi over 2 heads, the interleaved fused projection, the embedding LayerNorm.
inline std::unique_ptr<Chain> TinyBloom() {
  TransformerSpec lm;
  lm.vocab = 32, lm.n_ctx = 8, lm.n_layer = 2, lm.n_head = 2, lm.d_model = 16;
  return TinyLanguageModel(lm, BloomFamily);
}

// Linear, GELU, LayerNorm, linear, ReLU, then MSE or cross-entropy.
inline std::unique_ptr<Chain> TinySequential(bool mse) {
  using Fn = ActivationLayer<float>::Fn;
  auto chain = std::make_unique<Chain>();
  chain->T = 1;
  chain->B = 6;
  chain->in_width = 8;
  ParamRegistry &r = chain->registry;
  chain->layers.push_back(std::make_unique<LinearLayer<float>>("l0", 8, 16, true, r));
  chain->layers.push_back(std::make_unique<ActivationLayer<float>>(Fn::kGelu, 16));
  chain->layers.push_back(std::make_unique<LayerNormLayer<float>>("ln", 16, r));
  chain->layers.push_back(std::make_unique<LinearLayer<float>>("l1", 16, 4, false, r));
  chain->layers.push_back(std::make_unique<ActivationLayer<float>>(Fn::kRelu, 4));
  if (mse) {
    chain->layers.push_back(std::make_unique<MseLossLayer<float>>(4));
    chain->mse = true;
  } else {
    chain->layers.push_back(std::make_unique<CrossEntropyLossLayer<float>>(4));
    chain->classes = 4;
  }
  return chain;
}

// Builds the chain `make` returns with initialised parameters.
inline std::unique_ptr<Chain> MakeChain(std::unique_ptr<Chain> (*make)()) {
  std::unique_ptr<Chain> chain = make();
  chain->store = std::make_unique<ParamStore<float>>(chain->registry, nullptr);
  chain->store->Initialize(11);
  return chain;
}

struct ChainOutcome {
  double loss = 0;
  std::vector<float> grads;       // every parameter's gradient, flat
  std::vector<float> input_grad;  // of the first layer's input (sequential)
  std::string error;              // set-up, a layer or the backend failed
};

// Runs forward and backward of `chain` through `kernels` with every tensor
// in `memory`; `closed` runs the passes (the default: as they are), so a
// caller can close the memory around them.
inline ChainOutcome RunChain(
    Chain &chain, const Kernels<float> &kernels, TensorMemory &memory, ChainPass pass,
    const std::function<void(const std::function<void()> &)> &closed =
        [](const std::function<void()> &passes) { passes(); }) {
  const size_t L = chain.layers.size();
  const int64_t N = chain.B * chain.T;
  ParamStore<float> &store = *chain.store;
  const ActivationLimits limits{chain.B, chain.T, omp_get_max_threads()};
  ChainOutcome outcome;

  const size_t padded = size_t(store.padded_size());
  float *values = memory.TakeCopy(std::vector<float>(store.values(), store.values() + padded));
  float *grads = memory.TakeCopy(std::vector<float>(padded, 0.0f));
  if (values == nullptr || grads == nullptr) {
    outcome.error = "the tensor memory is too small";
    return outcome;
  }
  for (size_t id = 0; id < store.decls().size(); ++id) {
    store.SetParamPointer(int(id), values + store.decls()[id].offset);
    store.SetGradPointer(int(id), grads + store.decls()[id].offset);
  }

  std::mt19937 rng(5);
  MicroBatch<float> mb;
  mb.B = chain.B;
  mb.seq = chain.T;
  mb.max_threads = limits.max_threads;
  mb.compute = chain.compute;
  mb.kernels = &kernels;
  std::vector<int32_t> ids(size_t(2 * N));  // tokens | targets
  for (int32_t &id : ids) id = int32_t(rng() % uint32_t(chain.classes > 0 ? chain.classes : 1));
  ids[size_t(N + 1)] = -1;  // one ignored target
  const int32_t *device_ids = memory.TakeCopy(ids);
  mb.tokens = device_ids;
  mb.targets = chain.classes > 0 ? device_ids + N : nullptr;
  std::normal_distribution<float> normal;
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v) x = normal(rng);
    return memory.TakeCopy(v);
  };
  if (chain.in_width > 0) mb.inputs = random(N * chain.in_width);
  if (chain.mse) mb.labels = random(N * chain.layers[L - 2]->OutWidth());

  int64_t scratch = 1;
  std::vector<LayerActivations<float>> acts(L), deferred(L);
  std::vector<float *> out_grads(L, nullptr);  // gradient of layer i's output [N, OutWidth]
  for (size_t i = 0; i < L; ++i) {
    Layer<float> &layer = *chain.layers[i];
    layer.Bind(&store);
    for (const SavedTensorSpec &t : layer.SavedTensors(limits))
      acts[i].tensors.push_back(memory.Take<float>(t.numel));
    for (const SavedTensorSpec &t : layer.DeferredTensors(limits))
      deferred[i].tensors.push_back(memory.Take<float>(t.numel));
    scratch = std::max(scratch, layer.ScratchSize(limits));
    if (layer.OutWidth() > 0) out_grads[i] = memory.Take<float>(N * layer.OutWidth());
  }
  float *input_grad = chain.in_width > 0 ? memory.Take<float>(N * chain.in_width) : nullptr;
  mb.scratch = memory.Take<float>(scratch);
  if (mb.scratch == nullptr) {
    outcome.error = "the tensor memory is too small";
    return outcome;
  }
  auto in_of = [&](size_t i) -> const float * { return i == 0 ? mb.inputs : acts[i - 1][0]; };
  auto din_of = [&](size_t i) { return i == 0 ? input_grad : out_grads[i - 1]; };

  closed([&] {
    for (size_t i = 0; i < L; ++i) chain.layers[i]->Forward(in_of(i), acts[i], mb);
    if (pass == ChainPass::kWhole) {
      for (size_t i = L; i-- > 0;)
        chain.layers[i]->Backward(in_of(i), acts[i], out_grads[i], din_of(i), mb);
      return;
    }
    for (size_t i = L; i-- > 0;) {
      chain.layers[i]->RecomputeSaved(in_of(i), acts[i], mb);
      chain.layers[i]->BackwardInput(in_of(i), acts[i], out_grads[i], din_of(i), deferred[i], mb);
    }
    for (size_t i = 0; i < L; ++i)
      chain.layers[i]->BackwardWeight(in_of(i), acts[i], deferred[i], mb);
  });

  outcome.loss = acts[L - 1].loss;
  outcome.grads.resize(size_t(store.size()));
  memory.Download(outcome.grads.data(), grads, outcome.grads.size() * sizeof(float));
  if (input_grad) {
    outcome.input_grad.resize(size_t(N * chain.in_width));
    memory.Download(outcome.input_grad.data(), input_grad,
                    outcome.input_grad.size() * sizeof(float));
  }
  for (auto &layer : chain.layers) {
    Status st = layer->TakeError();
    if (!st.ok() && outcome.error.empty()) outcome.error = st.message();
  }
  Status st = kernels.TakeError();
  if (!st.ok() && outcome.error.empty()) outcome.error = st.message();
  return outcome;
}

// Host memory in one 64-byte-aligned block (what the CPU backend reads).
class HostMemory : public TensorMemory {
 public:
  explicit HostMemory(size_t bytes) : bytes_(bytes), data_(new char[bytes + 64]) {}
  std::string_view name() const override { return "host"; }
  void Zero(void *dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void *TakeBytes(size_t bytes) override {
    char *base = data_.get() + (64 - reinterpret_cast<uintptr_t>(data_.get()) % 64) % 64;
    if (used_ + bytes > bytes_) return nullptr;
    void *p = base + used_;
    used_ += bytes;
    return p;
  }
  void Upload(void *dst, const void *src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void Download(void *dst, const void *src, size_t bytes) override { std::memcpy(dst, src, bytes); }

 private:
  size_t bytes_, used_ = 0;
  std::unique_ptr<char[]> data_;
};

// One micro-batch (B 2, T 8) of a whole model built from `json`:
// `activations` as the model keeps them; with activations.half, the hooks
// round the layers' outputs and input gradients onto that 16-bit grid as
// 16-bit training does; kZeroBubbleRecompute runs the two backward halves
// (activations.split_backward must be set). `in_memory`: the model's buffers
// in `memory` too (else the host's); the tokens and targets are in `memory`.
struct ModelCase {
  std::string json = R"({"type":"gpt","vocab_size":32,"n_ctx":8,"n_layer":2,"n_head":2,)"
                     R"("d_model":16,"seed":7})";
  ActivationOptions activations;
  ChainPass pass = ChainPass::kWhole;
  ComputeType compute = ComputeType::kFp32;
};

class RoundingHooks final : public LayerHooks {
 public:
  explicit RoundingHooks(std::optional<Half> half) : half_(half) {}
  std::optional<Half> activation_half() const override { return half_; }

 private:
  std::optional<Half> half_;
};

inline ChainOutcome RunModel(
    const ModelCase &c, const Kernels<float> &kernels, TensorMemory &memory, bool in_memory,
    const std::function<void(const std::function<void()> &)> &closed =
        [](const std::function<void()> &passes) { passes(); }) {
  ChainOutcome outcome;
  Result<ModelSpec> spec = ParseModelSpec(c.json);
  if (!spec.ok()) {
    outcome.error = spec.status().message();
    return outcome;
  }
  const int64_t B = 2, T = 8;
  MemoryTracker tracker;
  Model<float> model(spec.value(), {B, T, omp_get_max_threads()}, &tracker, {}, c.activations, {},
                     in_memory ? &memory : nullptr);
  model.SetKernels(kernels);
  model.SetComputeType(c.compute);
  std::mt19937 rng(9);
  std::vector<int32_t> ids(size_t(2 * B * T));  // tokens | targets
  for (int32_t &id : ids) id = int32_t(rng() % 32u);
  ids[size_t(B * T + 3)] = -1;  // one ignored target
  const int32_t *device_ids = memory.TakeCopy(ids);
  MicroBatch<float> mb;
  mb.B = B;
  mb.seq = T;
  mb.tokens = device_ids;
  mb.targets = device_ids + B * T;
  RoundingHooks hooks(c.activations.half);
  Status st;
  closed([&] {
    Result<double> loss = model.Forward(mb, &hooks);
    st = loss.status();
    if (!st.ok()) return;
    if (c.pass == ChainPass::kWhole) {
      st = model.Backward(mb, &hooks);
      return;
    }
    st = model.BackwardInput(0, model.all_layers(), nullptr, nullptr, mb, &hooks);
    if (st.ok()) st = model.BackwardWeight(0, model.all_layers(), mb, &hooks);
  });
  if (!st.ok()) {
    outcome.error = st.message();
    return outcome;
  }
  outcome.loss = model.Loss(0);
  outcome.grads.resize(size_t(model.params().size()));
  const size_t bytes = outcome.grads.size() * sizeof(float);
  if (in_memory)
    memory.Download(outcome.grads.data(), model.params().grads(), bytes);
  else
    std::memcpy(outcome.grads.data(), model.params().grads(), bytes);
  return outcome;
}

}  // namespace dst
