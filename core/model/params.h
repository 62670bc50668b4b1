// Parameters live in two flat buffers (values and gradients), one per engine,
// carved into named per-tensor views. Sharding (ZeRO) is then a matter of
// offsets, and communication buckets are contiguous ranges.
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

struct ParamDecl {
  std::string name;            // PyTorch-style, e.g. "transformer.h.0.ln_1.weight"
  std::vector<int64_t> shape;  // row-major
  ParamInit init;
  int64_t numel = 0;
  int64_t offset = 0;  // element offset into the flat buffers
};

// Layers declare their parameters here while the model is being built.
class ParamRegistry {
 public:
  // Returns the parameter's id (its index in declaration order).
  int Add(std::string name, std::vector<int64_t> shape, ParamInit init);
  const std::vector<ParamDecl> &decls() const { return decls_; }
  int64_t total_numel() const { return total_; }

 private:
  std::vector<ParamDecl> decls_;
  int64_t total_ = 0;
};

// The flat value and gradient buffers for a registry's declarations.
template <typename T>
class ParamStore {
 public:
  // The buffers are padded with zeros to a multiple of `pad_multiple` (the
  // data-parallel size) so that they cut into equal shards.
  ParamStore(const ParamRegistry &registry, MemoryTracker *tracker, int64_t pad_multiple = 1)
      : decls_(registry.decls()),
        numel_(registry.total_numel()),
        values_(tracker, MemoryCategory::kParameters, Padded(numel_, pad_multiple)),
        grads_(tracker, MemoryCategory::kGradients, Padded(numel_, pad_multiple)) {}

  // Deterministic initialisation: element i of tensor k is a pure function of
  // (seed, k, i).
  void Initialize(uint64_t seed);

  T *param(int id) { return values_.data() + decls_[id].offset; }
  T *grad(int id) { return grads_.data() + decls_[id].offset; }
  T *values() { return values_.data(); }
  T *grads() { return grads_.data(); }
  const T *values() const { return values_.data(); }
  const T *grads() const { return grads_.data(); }
  // Parameters (without padding) and the padded buffer length.
  int64_t size() const { return numel_; }
  int64_t padded_size() const { return int64_t(values_.size()); }
  const std::vector<ParamDecl> &decls() const { return decls_; }
  // Index of the tensor called `name`, or -1.
  int Find(std::string_view name) const;

 private:
  static size_t Padded(int64_t n, int64_t multiple) {
    return size_t((n + multiple - 1) / multiple * multiple);
  }
  std::vector<ParamDecl> decls_;
  int64_t numel_;
  Buffer<T> values_;  // [padded_size]
  Buffer<T> grads_;   // [padded_size]
};

}  // namespace dst
