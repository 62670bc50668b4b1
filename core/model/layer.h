// A model is an ordered list of layers, each with an explicit forward and
// backward (no autograd tape), like DeepSpeed's PipelineModule(layers=[...]).
// A layer owns the activations it saves for its backward, sized once for the
// largest micro-batch, so a training step allocates nothing.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/model/params.h"
#include "core/runtime/memory.h"

namespace dst {

// One micro-batch as the layers see it. Rows of an activation are B*T tokens
// for a GPT and B samples for a sequential model (seq = 1).
template <typename T>
struct MicroBatch {
  int64_t B = 0;
  int64_t seq = 1;
  const int32_t *tokens = nullptr;   // GPT: [B, T]
  const int32_t *targets = nullptr;  // GPT: [B, T]; sequential cross-entropy: [B]
  const T *inputs = nullptr;         // sequential: [B, input_dim]
  const T *labels = nullptr;         // sequential MSE: [B, output_dim]
  T grad_scale = 1;                  // d(step loss)/d(this micro-batch's loss) = 1/accumulation
  T *scratch = nullptr;              // shared backward workspace (Layer::ScratchSize)
  int max_threads = 1;
  int64_t rows() const { return B * seq; }
};

// The largest micro-batch a layer must hold activations for.
struct ActivationLimits {
  int64_t max_B = 1;
  int64_t max_T = 1;
  int max_threads = 1;
  int64_t max_rows() const { return max_B * max_T; }
};

template <typename T>
class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string_view Kind() const = 0;
  // Features per row of the output (0 for a loss layer).
  virtual int64_t OutWidth() const = 0;
  // Allocates the saved activations for micro-batches up to `limits`.
  virtual void Reserve(const ActivationLimits &limits, MemoryTracker *tracker) = 0;
  // Elements of shared scratch the backward needs (the model allocates the max).
  virtual int64_t ScratchSize(const ActivationLimits &) const { return 0; }
  // in: the previous layer's output [rows, in_width] (unused by a first layer
  // that reads the batch). Returns this layer's output [rows, OutWidth()],
  // owned by the layer and valid until its next Forward.
  virtual const T *Forward(const T *in, const MicroBatch<T> &mb) = 0;
  // dout: gradient of the output [rows, OutWidth()] (null for a loss layer);
  // the layer may overwrite it. din: where to write the input gradient
  // [rows, in_width], or null when nobody needs it. Parameter gradients are
  // accumulated (+=) into the store.
  virtual void Backward(T *dout, T *din, const MicroBatch<T> &mb) = 0;
  // Loss layers: the mean loss of the last Forward.
  virtual bool IsLoss() const { return false; }
  virtual double Loss() const { return 0.0; }
  // Floating-point operations of one forward over rows (GEMMs counted as 2mnk).
  virtual double ForwardFlops(int64_t B, int64_t seq) const = 0;
  // The activation buffers Forward fills and Backward reads (its output
  // included, which the next layer reads as its input). Under 16-bit training
  // the model keeps them in 16 bits between forward and backward and turns
  // these buffers into views of a shared fp32 region (Model::
  // StoreActivationsIn16Bits). Buffers left out stay the layer's own, in fp32
  // (e.g. LayerNorm statistics and the loss's probabilities, kept exact).
  virtual std::vector<Buffer<T> *> SavedBuffers() { return {}; }

  void Bind(ParamStore<T> *store) { store_ = store; }

 protected:
  ParamStore<T> *store_ = nullptr;
};

}  // namespace dst
