#include "core/model/tp_plan.h"

#include <string>

namespace dst {

namespace {

using Kind = SequentialLayerSpec::Kind;

bool ElementWise(Kind kind) {
  return kind == Kind::kRelu || kind == Kind::kGelu;
}

Status Indivisible(size_t layer, const char *what, int64_t features, int64_t tp) {
  return ConfigError("tensor parallelism: layers." + std::to_string(layer) +
                     " (linear) splits its " + what + " features, " + std::to_string(features) +
                     ", across tensor-parallel size " + std::to_string(tp) +
                     ", which does not divide them; choose a tp_size that divides " +
                     std::to_string(features) + " or change the layer's width");
}

}  // namespace

Result<std::vector<TpRole>> PlanTensorParallel(const ModelSpec &spec, int64_t tp) {
  const size_t layers =
      spec.IsLanguageModel() ? size_t(spec.lm.n_layer) + 2 : spec.layers.size() + 1;
  std::vector<TpRole> roles(layers, TpRole::kReplicated);
  if (tp == 1) return roles;
  if (spec.IsLanguageModel()) {
    const TransformerSpec &lm = spec.lm;
    if (lm.n_head % tp != 0)
      return ConfigError("tensor parallelism: n_head " + std::to_string(lm.n_head) +
                         " does not divide into tensor-parallel size " + std::to_string(tp) +
                         " (each rank holds whole heads); choose a tp_size that divides " +
                         std::to_string(lm.n_head));
    if (lm.kv_heads() % tp != 0)
      return ConfigError("tensor parallelism: num_key_value_heads " +
                         std::to_string(lm.kv_heads()) +
                         " does not divide into tensor-parallel size " + std::to_string(tp) +
                         " (each rank holds whole key/value heads, as Megatron splits "
                         "grouped-query attention); choose a tp_size that divides " +
                         std::to_string(lm.kv_heads()));
    if (lm.ffn_size() % tp != 0)
      return ConfigError("tensor parallelism: the MLP's " + std::to_string(lm.ffn_size()) +
                         " intermediate features do not divide into tensor-parallel size " +
                         std::to_string(tp) + "; choose a tp_size that divides them");
    for (size_t i = 1; i + 1 < layers; ++i) roles[i] = TpRole::kHeads;
    roles.front() = roles.back() = TpRole::kVocab;
    return roles;
  }
  const std::vector<SequentialLayerSpec> &l = spec.layers;
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i].kind != Kind::kLinear || roles[i] != TpRole::kReplicated) continue;
    // A partner: the next Linear, with only element-wise layers between.
    size_t j = i + 1;
    while (j < l.size() && ElementWise(l[j].kind)) ++j;
    const bool paired = j < l.size() && l[j].kind == Kind::kLinear;
    if (l[i].out_features % tp != 0) return Indivisible(i, "output", l[i].out_features, tp);
    if (!paired) {
      roles[i] = TpRole::kColumnGathered;
      continue;
    }
    roles[i] = TpRole::kColumn;
    for (size_t k = i + 1; k < j; ++k) roles[k] = TpRole::kLocalSlice;
    roles[j] = TpRole::kRow;
  }
  return roles;
}

}  // namespace dst
