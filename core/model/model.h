// Model<T>: the ordered layers of a model spec, the flat parameter store they
// use, and the buffers that carry gradients between them.
#pragma once

#include <memory>
#include <vector>

#include "core/model/layer.h"
#include "core/model/model_spec.h"
#include "core/model/params.h"
#include "core/precision/half_ops.h"

namespace dst {

// Trainable parameters of a spec (tied weights once), without allocating.
int64_t CountParameters(const ModelSpec &spec);
// The parameter declarations of a spec (names, shapes, flat offsets), without allocating.
std::vector<ParamDecl> DeclareParameters(const ModelSpec &spec);

// The parameters one layer touches: the flat range [begin, end) of the
// tensors it declared, and the ids of every tensor it reads or writes (its own
// in order, then tied ones declared by another layer, like the GPT head's wte).
struct LayerParamUse {
  int64_t begin = 0, end = 0;
  std::vector<int> ids;
};

// Called by Model::Forward/Backward around each layer, e.g. to gather a
// layer's parameters before it runs (ZeRO stage 3) and to reduce its
// gradients once its backward is done. Hooks cannot fail the pass: an
// implementation records its first error for the caller to collect.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void BeforeForward(size_t layer) { (void)layer; }
  virtual void BeforeBackward(size_t layer) { (void)layer; }
  virtual void AfterBackward(size_t layer) { (void)layer; }
  // Mixed precision: rounds fp32 activations onto the 16-bit grid in place;
  // Model<float> applies it to every layer's output and input gradient, so
  // what crosses a layer boundary is a 16-bit value. Null: leave them alone.
  using RoundFn = void (*)(float *data, int64_t n);
  virtual RoundFn activation_rounding() const { return nullptr; }
};

template <typename T>
class Model {
 public:
  // Builds the layers, allocates the flat buffers `store` asks for (padded
  // to a multiple of store.pad_multiple, the dp size), initialises the
  // weights from spec.seed, and reserves activations for `limits`.
  Model(const ModelSpec &spec, const ActivationLimits &limits, MemoryTracker *tracker,
        const ParamStoreOptions &store = {});

  // Runs every layer forward; returns the micro-batch's mean loss.
  double Forward(MicroBatch<T> &mb, LayerHooks *hooks = nullptr);
  // Runs every layer backward, accumulating parameter gradients (scaled by
  // mb.grad_scale). Must follow Forward on the same micro-batch.
  void Backward(MicroBatch<T> &mb, LayerHooks *hooks = nullptr);
  // After layer i's backward, the lowest flat offset whose gradients can
  // still change: everything at or above it is final.
  int64_t GradientsFinalBoundary(size_t layer) const {
    return layer == 0 ? 0 : first_offset_[layer];
  }
  // Per layer: the parameters it touches.
  const std::vector<LayerParamUse> &layer_params() const { return layer_params_; }

  // 16-bit training: every layer's saved activations (Layer::SavedBuffers)
  // become views of one of two shared fp32 regions (even and odd layers, so a
  // layer can read its predecessor's output while writing its own), and each
  // layer's values are kept in 16 bits (`half`, rounded to nearest even)
  // from the end of its forward to its backward, which restores them. Saved
  // activation memory is then 2 bytes per value plus the two regions. Call
  // once, after construction; a no-op for Model<double>.
  void StoreActivationsIn16Bits(Half half, MemoryTracker *tracker);

  ParamStore<T> &params() { return *store_; }
  const ParamStore<T> &params() const { return *store_; }
  const ModelSpec &spec() const { return spec_; }
  const ActivationLimits &limits() const { return limits_; }
  const std::vector<std::unique_ptr<Layer<T>>> &layers() const { return layers_; }
  // Forward FLOPs of one micro-batch of B samples of T tokens.
  double ForwardFlops(int64_t B, int64_t seq) const;

 private:
  static void RoundActivations(LayerHooks *hooks, const T *data, int64_t n);
  // 16-bit activation storage (StoreActivationsIn16Bits).
  void Stash(size_t layer);
  void Restore(size_t layer);
  // Whether `p` lies in the shared region of `layer`'s parity.
  bool InRegion(size_t layer, const T *p) const;
  ModelSpec spec_;
  ActivationLimits limits_;
  std::vector<std::unique_ptr<Layer<T>>> layers_;
  std::vector<int64_t> first_offset_;  // per layer: lowest offset of the params it writes
  std::vector<LayerParamUse> layer_params_;
  std::unique_ptr<ParamStore<T>> store_;
  Buffer<T> grad_a_, grad_b_;  // [max_rows, max width] ping-pong input/output gradients
  Buffer<T> scratch_;          // [max over layers of ScratchSize]
  bool stash_activations_ = false;
  Half half_ = Half::kFp16;
  Buffer<T> regions_[2];                         // [largest even / odd layer's saved values]
  std::vector<Buffer<uint16_t>> stashes_;        // per layer [its saved values], 16 bits
  std::vector<std::vector<Buffer<T> *>> saved_;  // per layer: its saved buffers (views)
  int64_t resident_[2] = {-1, -1};               // layer whose values a region holds
};

}  // namespace dst
