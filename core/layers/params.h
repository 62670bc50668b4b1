// Parameters live in two flat buffers (values and gradients), one per engine,
// carved into named per-tensor views. Sharding (ZeRO) is then a matter of
// offsets, and communication buckets are contiguous ranges.
//
// Layers reach a tensor only through param(id) and grad(id), which read a
// per-tensor pointer table (by default: views of the flat buffers). ZeRO
// stages 2 and 3 leave out the full gradient (and value) buffer and point a
// layer's tensors at communication staging buffers while the layer runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/runtime/memory.h"

namespace dst {

struct ParamInit {
  enum class Kind { kNormal, kUniform, kConstant };
  Kind kind = Kind::kConstant;
  double value = 0.0;  // normal: std; uniform: bound (U(-b, b)); constant: the value
  static ParamInit Normal(double std) { return {Kind::kNormal, std}; }
  static ParamInit Uniform(double bound) { return {Kind::kUniform, bound}; }
  static ParamInit Constant(double v) { return {Kind::kConstant, v}; }
};

// How a tensor is cut across ranks (tensor parallelism): this rank holds
// part `index` of `parts` equal slices along dimension `dim` of the global
// tensor. dim < 0: not split (the rank holds the whole tensor). With
// `groups` > 1 the dimension is `groups` blocks, each cut the same way (a
// fused [q; k; v] projection split by heads: part i of each of q, k and v).
// With `padded` > 0 the dimension is padded to that many rows beyond the
// global tensor's (Megatron's padded vocabulary, so that any tensor-parallel
// size divides it): the parts cut `padded`, and a local element in a padding
// row belongs to no element of the global tensor (GlobalElement is -1).
struct TensorSplit {
  int dim = -1;
  int64_t parts = 1, index = 0;
  int64_t groups = 1;
  int64_t padded = 0;
  // Whether ranks hold different parts (tensor parallelism).
  bool split() const { return dim >= 0 && parts > 1; }
  // Whether this rank's tensor differs from the global one: a part, or padded.
  bool sliced() const { return dim >= 0 && (parts > 1 || padded > 0); }
};

struct ParamDecl {
  std::string name;                   // PyTorch-style, e.g. "transformer.h.0.ln_1.weight"
  std::vector<int64_t> shape;         // row-major, as this rank stores it (its slice)
  std::vector<int64_t> global_shape;  // the whole tensor, as checkpoints and get_param speak it
  TensorSplit split;                  // how `shape` is cut from `global_shape`
  ParamInit init;
  int64_t numel = 0;   // of `shape`
  int64_t offset = 0;  // element offset into the flat buffers
  // The tensor's index in the whole model's declarations, which seeds its
  // initial values: a pipeline stage declares a subset of the tensors, and
  // each must start as it would on one rank. -1: its index here.
  int64_t init_key = -1;
  // Read by its layer only as a GEMM's weight through the kernels that take
  // its bf16 copy too (Kernels::*Stashing / *Stashed with ParamStore::param16):
  // where the layers multiply in bf16 on a backend keeping bf16 copies
  // (Model::Bf16Operands) and the tensor is stored in bf16, its fp32 working
  // copy is never read, so the ZeRO partition does not widen it (param() is
  // null then).
  bool bf16_gemm_weight = false;
  // The global tensor's flat index of local element i: initialisation and
  // checkpoints address a slice's elements by where they sit in the whole
  // tensor, so every split starts from the same global values. -1 for an
  // element of a padding row.
  int64_t GlobalElement(int64_t i) const;
  // The length of the runs in which consecutive local elements are
  // consecutive in the global tensor too (numel when the tensor is whole;
  // a row when it is padded): local run k starts at GlobalElement(k * GlobalRun()).
  int64_t GlobalRun() const;
  // Elements of the global tensor.
  int64_t GlobalNumel() const;
};

// Layers declare their parameters here while the model is being built.
class ParamRegistry {
 public:
  // Declares a tensor of `global_shape`, stored whole or as the slice
  // `split` names (the split dimension must divide evenly; an internal error
  // otherwise: the layers check their sizes first). Returns the parameter's
  // id (its index in declaration order).
  int Add(std::string name, std::vector<int64_t> global_shape, ParamInit init,
          TensorSplit split = {});
  const std::vector<ParamDecl> &decls() const { return decls_; }
  int64_t total_numel() const { return total_; }
  // Tensor `id` initialises as the whole model's tensor `key` does.
  void SetInitKey(int id, int64_t key) { decls_[size_t(id)].init_key = key; }
  // Tensor `id` is read only as a GEMM weight with its bf16 copy
  // (ParamDecl::bf16_gemm_weight).
  void MarkBf16GemmWeight(int id) { decls_[size_t(id)].bf16_gemm_weight = true; }

 private:
  std::vector<ParamDecl> decls_;
  int64_t total_ = 0;
};

// Which full-size flat buffers a ParamStore allocates. The buffers are padded
// with zeros to a multiple of `pad_multiple` (the data-parallel size) so that
// they cut into equal shards. ZeRO stage 2 leaves out the gradients and stage
// 3 the values too: their shards live in core/zero, which sets the pointers.
struct ParamStoreOptions {
  int64_t pad_multiple = 1;
  bool full_values = true;
  bool full_grads = true;
};

// The flat value and gradient buffers for a registry's declarations.
template <typename T>
class ParamStore {
 public:
  // `memory`: where the flat buffers live (null: host memory).
  ParamStore(const ParamRegistry &registry, MemoryTracker *tracker,
             const ParamStoreOptions &options = {}, MemoryResource *memory = nullptr);

  // Deterministic initialisation of the flat values (when allocated): element
  // i of tensor k is a pure function of (seed, k, i). Values in a memory
  // resource are computed on the host and uploaded.
  void Initialize(uint64_t seed);
  // The same values for flat elements [begin, end) into out[0, end - begin):
  // lets a rank initialise just its shard. Padding elements are zero.
  void InitializeRange(uint64_t seed, int64_t begin, int64_t end, T *out) const;

  // Tensor `id` as the layers see it (see the pointer table above).
  T *param(int id) { return param_ptr_[size_t(id)]; }
  // Tensor `id`'s bf16 copy (the same values as param(id), e.g. the ZeRO
  // partition's 16-bit staging, which bf16 GEMMs read instead of rounding the
  // fp32 values again), or null when there is none.
  const uint16_t *param16(int id) const { return param16_ptr_[size_t(id)]; }
  T *grad(int id) { return grad_ptr_[size_t(id)]; }
  // Zeroes the full gradient buffer (where it lives), when allocated.
  void ZeroGrads() { grads_.zero(); }
  // Points tensor `id` at p, and its bf16 copy at bf16 (null: none; a copy
  // never outlives the pointer it was set with).
  void SetParamPointer(int id, T *p, const uint16_t *bf16 = nullptr) {
    param_ptr_[size_t(id)] = p;
    param16_ptr_[size_t(id)] = bf16;
  }
  void SetGradPointer(int id, T *g) { grad_ptr_[size_t(id)] = g; }
  // The flat buffers; null when not allocated (ZeRO stages 2 and 3).
  T *values() { return values_.data(); }
  T *grads() { return grads_.data(); }
  const T *values() const { return values_.data(); }
  const T *grads() const { return grads_.data(); }
  // Parameters (without padding) and the padded buffer length.
  int64_t size() const { return numel_; }
  int64_t padded_size() const { return padded_; }
  const std::vector<ParamDecl> &decls() const { return decls_; }
  // Index of the tensor called `name`, or -1.
  int Find(std::string_view name) const;

 private:
  // At least one element per rank, as ShardLayout (a stage of parameter-free layers).
  static int64_t Padded(int64_t n, int64_t multiple) {
    return n == 0 ? multiple : (n + multiple - 1) / multiple * multiple;
  }
  std::vector<ParamDecl> decls_;
  int64_t numel_;
  int64_t padded_;
  Buffer<T> values_;                           // [padded_size] or empty
  Buffer<T> grads_;                            // [padded_size] or empty
  std::vector<T *> param_ptr_, grad_ptr_;      // per tensor
  std::vector<const uint16_t *> param16_ptr_;  // per tensor, or null
};

}  // namespace dst
