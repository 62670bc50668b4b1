#include "core/zero/param_types.h"

#include "core/model/family.h"

#include <algorithm>
#include <cstdlib>

namespace dst {

std::string ZeroParamTypeOf(const ModelSpec &spec, const std::string &name) {
  if (spec.IsLanguageModel()) return FamilyParamType(spec, name);
  // Sequential: "layers.<g>.weight" of spec.layers[g].
  if (name.rfind("layers.", 0) != 0) return "";
  const size_t g = size_t(std::strtoull(name.c_str() + 7, nullptr, 10));
  if (g >= spec.layers.size()) return "";
  switch (spec.layers[g].kind) {
    case SequentialLayerSpec::Kind::kLinear:
      return "Linear";
    case SequentialLayerSpec::Kind::kLayerNorm:
      return "LayerNorm";
    default:
      return "";
  }
}

std::vector<bool> WholeByParamType(const ModelSpec &spec, const std::vector<ParamDecl> &decls,
                                   const std::vector<std::string> &allowed,
                                   const std::vector<std::string> &forced) {
  std::vector<bool> whole(decls.size(), false);
  if (allowed.empty() && forced.empty()) return whole;
  auto named = [](const std::vector<std::string> &list, const std::string &type) {
    return std::find(list.begin(), list.end(), type) != list.end();
  };
  for (size_t k = 0; k < decls.size(); ++k) {
    const std::string type = ZeroParamTypeOf(spec, decls[k].name);
    whole[k] = named(forced, type) || (!allowed.empty() && !named(allowed, type));
  }
  return whole;
}

std::vector<bool> Fp32ByParamType(const ModelSpec &spec, const std::vector<ParamDecl> &decls,
                                  const std::vector<std::string> &types) {
  std::vector<bool> fp32(decls.size(), false);
  for (size_t k = 0; k < decls.size() && !types.empty(); ++k) {
    const std::string type = ZeroParamTypeOf(spec, decls[k].name);
    fp32[k] = std::find(types.begin(), types.end(), type) != types.end();
  }
  return fp32;
}

}  // namespace dst
