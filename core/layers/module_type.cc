#include "core/layers/module_type.h"

namespace dst {

std::string_view ModuleName(ModuleType t) {
  switch (t) {
    case ModuleType::kEmbedding:
      return "Embedding";
    case ModuleType::kLayerNorm:
      return "LayerNorm";
    case ModuleType::kAttention:
      return "Attention";
    case ModuleType::kLinear:
      return "Linear";
    case ModuleType::kRmsNorm:
      return "RMSNorm";
    case ModuleType::kWhole:
      break;
  }
  return "";
}

ModuleSet ModuleSetOf(const std::vector<std::string> &names) {
  ModuleSet set;
  for (const std::string &name : names)
    for (ModuleType t : {ModuleType::kEmbedding, ModuleType::kLayerNorm, ModuleType::kAttention,
                         ModuleType::kLinear, ModuleType::kRmsNorm})
      if (ModuleName(t) == name) set.add(t);
  return set;
}

}  // namespace dst
