#include "core/model/params.h"

#include "core/runtime/rng.h"

namespace dst {

int ParamRegistry::Add(std::string name, std::vector<int64_t> shape, ParamInit init) {
  ParamDecl decl;
  decl.name = std::move(name);
  decl.shape = std::move(shape);
  decl.init = init;
  decl.numel = 1;
  for (int64_t d : decl.shape) decl.numel *= d;
  decl.offset = total_;
  total_ += decl.numel;
  decls_.push_back(std::move(decl));
  return int(decls_.size()) - 1;
}

template <typename T>
void ParamStore<T>::Initialize(uint64_t seed) {
  for (size_t k = 0; k < decls_.size(); ++k) {
    const ParamDecl &d = decls_[k];
    T *p = values_.data() + d.offset;
    for (int64_t i = 0; i < d.numel; ++i) {
      switch (d.init.kind) {
        case ParamInit::Kind::kNormal:
          p[i] = T(d.init.value * StandardNormal(seed, k, uint64_t(i)));
          break;
        case ParamInit::Kind::kUniform:
          p[i] = T(d.init.value * (2.0 * UniformOpen(HashKey(seed, k, uint64_t(i))) - 1.0));
          break;
        case ParamInit::Kind::kConstant:
          p[i] = T(d.init.value);
          break;
      }
    }
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
