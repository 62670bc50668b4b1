#include "core/layers/params.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/runtime/rng.h"

namespace dst {

int ParamRegistry::Add(std::string name, std::vector<int64_t> global_shape, ParamInit init,
                       TensorSplit split) {
  ParamDecl decl;
  decl.name = std::move(name);
  decl.global_shape = std::move(global_shape);
  decl.shape = decl.global_shape;
  decl.split = split;
  if (split.sliced()) {
    int64_t &d = decl.shape.at(size_t(split.dim));
    if (split.padded > 0) d = split.padded;
    if (d % (split.parts * split.groups) != 0 || split.index < 0 || split.index >= split.parts ||
        (split.padded > 0 && (split.padded < decl.global_shape[size_t(split.dim)] ||
                              split.groups != 1)))
      throw std::logic_error("ParamRegistry::Add: " + decl.name + " dimension " +
                             std::to_string(split.dim) + " of " + std::to_string(d) +
                             " does not split into " + std::to_string(split.parts));
    d /= split.parts;
  }
  decl.init = init;
  decl.numel = 1;
  for (int64_t d : decl.shape) decl.numel *= d;
  decl.offset = total_;
  total_ += decl.numel;
  decls_.push_back(std::move(decl));
  return int(decls_.size()) - 1;
}

int64_t ParamDecl::GlobalElement(int64_t i) const {
  if (!split.sliced()) return i;
  // Row-major: the elements after the split dimension form one contiguous
  // run ("inner"); the split dimension's local index shifts by the slice.
  const size_t dim = size_t(split.dim);
  int64_t inner = 1;
  for (size_t k = dim + 1; k < shape.size(); ++k) inner *= shape[k];
  const int64_t local_dim = shape[dim];
  const int64_t outer = i / (local_dim * inner);
  // Along the split dimension: block g of `groups`, row j of this part of it.
  const int64_t a = (i / inner) % local_dim, per_group = local_dim / split.groups;
  const int64_t at =
      (a / per_group) * per_group * split.parts + split.index * per_group + a % per_group;
  if (at >= global_shape[dim]) return -1;  // a padding row
  return (outer * global_shape[dim] + at) * inner + i % inner;
}

int64_t ParamDecl::GlobalRun() const {
  if (!split.sliced()) return numel;
  int64_t inner = 1;
  for (size_t k = size_t(split.dim) + 1; k < shape.size(); ++k) inner *= shape[k];
  if (split.padded > 0) return inner;  // rows: a padding row maps nowhere
  return shape[size_t(split.dim)] / split.groups * inner;
}

int64_t ParamDecl::GlobalNumel() const {
  int64_t n = 1;
  for (int64_t d : global_shape) n *= d;
  return n;
}

template <typename T>
ParamStore<T>::ParamStore(const ParamRegistry &registry, MemoryTracker *tracker,
                          const ParamStoreOptions &options, MemoryResource *memory)
    : decls_(registry.decls()),
      numel_(registry.total_numel()),
      padded_(Padded(numel_, options.pad_multiple)) {
  if (options.full_values)
    values_ = Buffer<T>(tracker, MemoryCategory::kParameters, size_t(padded_), memory);
  if (options.full_grads)
    grads_ = Buffer<T>(tracker, MemoryCategory::kGradients, size_t(padded_), memory);
  param_ptr_.assign(decls_.size(), nullptr);
  param16_ptr_.assign(decls_.size(), nullptr);
  grad_ptr_.assign(decls_.size(), nullptr);
  for (size_t k = 0; k < decls_.size(); ++k) {
    if (values_.data()) param_ptr_[k] = values_.data() + decls_[k].offset;
    if (grads_.data()) grad_ptr_[k] = grads_.data() + decls_[k].offset;
  }
}

namespace {

// Element i of a tensor declared with `init`, stream k.
double InitialValue(const ParamInit &init, uint64_t seed, uint64_t k, uint64_t i) {
  switch (init.kind) {
    case ParamInit::Kind::kNormal:
      return init.value * StandardNormal(seed, k, i);
    case ParamInit::Kind::kUniform:
      return init.value * (2.0 * UniformOpen(HashKey(seed, k, i)) - 1.0);
    case ParamInit::Kind::kConstant:
      break;
  }
  return init.value;
}

}  // namespace

template <typename T>
void ParamStore<T>::InitializeRange(uint64_t seed, int64_t begin, int64_t end, T *out) const {
  if (end <= begin) return;
  std::memset(static_cast<void *>(out), 0, size_t(end - begin) * sizeof(T));
  for (size_t k = 0; k < decls_.size(); ++k) {
    const ParamDecl &d = decls_[k];
    const int64_t lo = std::max(begin, d.offset), hi = std::min(end, d.offset + d.numel);
    for (int64_t x = lo; x < hi; ++x) {
      const int64_t global = d.GlobalElement(x - d.offset);
      if (global < 0) continue;  // a padding row stays 0
      out[x - begin] = T(InitialValue(d.init, seed, d.init_key >= 0 ? uint64_t(d.init_key) : k,
                                      uint64_t(global)));
    }
  }
}

template <typename T>
void ParamStore<T>::Initialize(uint64_t seed) {
  if (MemoryResource *memory = values_.resource()) {
    std::vector<T> host(static_cast<size_t>(padded_));
    InitializeRange(seed, 0, padded_, host.data());
    memory->Upload(values_.data(), host.data(), host.size() * sizeof(T));
  } else if (values_.data()) {
    InitializeRange(seed, 0, padded_, values_.data());
  }
  grads_.zero();
}

template <typename T>
int ParamStore<T>::Find(std::string_view name) const {
  for (size_t k = 0; k < decls_.size(); ++k)
    if (decls_[k].name == name) return int(k);
  return -1;
}

template class ParamStore<float>;
template class ParamStore<double>;

}  // namespace dst
