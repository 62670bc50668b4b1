// The layer types a config names (fp16_override_modules, ZeRO 3's
// zero_allowed_param_types / zero_force_param_types) and the parts of our
// layers they stand for:
//   Embedding  GPT wte, wpe (the head's tied wte too)
//   LayerNorm  GPT ln_1, ln_2, ln_f; BLOOM's LayerNorms; sequential layernorm
//   RMSNorm    LLaMA's input_layernorm, post_attention_layernorm, norm
//   Attention  GPT attn.c_attn, attn.c_proj and the attention between them
//   Linear     GPT mlp.c_fc, mlp.c_proj; sequential linear
// A layer is made of one or more of them (a GPT block of LayerNorm,
// Attention and Linear); what belongs to the layer as a whole (its output,
// a residual sum) is kWhole.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dst {

enum class ModuleType : uint8_t { kWhole, kEmbedding, kLayerNorm, kAttention, kLinear, kRmsNorm };

// A set of module types (kWhole is never a member).
class ModuleSet {
 public:
  ModuleSet() = default;
  ModuleSet(std::initializer_list<ModuleType> types) {
    for (ModuleType t : types) add(t);
  }
  void add(ModuleType t) {
    if (t != ModuleType::kWhole) bits_ |= Bit(t);
  }
  bool has(ModuleType t) const { return t != ModuleType::kWhole && (bits_ & Bit(t)) != 0; }
  bool empty() const { return bits_ == 0; }
  // Every member of `other` is a member of this set.
  bool covers(ModuleSet other) const { return (other.bits_ & ~bits_) == 0; }
  bool operator==(const ModuleSet &) const = default;

 private:
  static uint32_t Bit(ModuleType t) { return uint32_t(1) << uint32_t(t); }
  uint32_t bits_ = 0;
};

// The config's name of a module type ("Linear", ...); "" for kWhole.
std::string_view ModuleName(ModuleType t);
// The set a config's list names (canonical names, as the config reader
// stores them); names without a part here ("CrossAttention") add nothing.
ModuleSet ModuleSetOf(const std::vector<std::string> &names);

}  // namespace dst
