// ZeRO 3's per-layer-type control (zero_optimization.zero_allowed_param_types
// / zero_force_param_types, the articles' keys): which layer type each tensor
// belongs to, and which tensors stay whole on every rank because of it.
//
// The map of our tensors onto the type names (documented in docs/configuration.md):
//   Embedding  GPT wte, wpe
//   LayerNorm  GPT ln_1, ln_2, ln_f; sequential layernorm
//   Attention  GPT attn.c_attn, attn.c_proj  (CrossAttention: none here)
//   Linear     GPT mlp.c_fc, mlp.c_proj; sequential linear
#pragma once

#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/layers/params.h"
#include "core/model/model_spec.h"

namespace dst {

// The type of tensor `name` of a model of `spec` ("" when none applies).
std::string ZeroParamTypeOf(const ModelSpec &spec, const std::string &name);

// Per declaration: kept whole at stage 3 because its type is forced, or
// because an allowed list exists and does not name it. Empty lists: none.
// Per declaration: kept in fp32 under 16-bit training because its type is
// in `types` (fp16.fp16_override_modules / bf16.bf16_override_modules).
std::vector<bool> Fp32ByParamType(const ModelSpec &spec, const std::vector<ParamDecl> &decls,
                                  const std::vector<std::string> &types);

std::vector<bool> WholeByParamType(const ModelSpec &spec, const std::vector<ParamDecl> &decls,
                                   const std::vector<std::string> &allowed,
                                   const std::vector<std::string> &forced);

}  // namespace dst
