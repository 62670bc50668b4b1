// How one layer of a model is cut across its tensor-parallel group
// (core/model/tp_plan.h decides it per layer).
#pragma once

namespace dst {

enum class TpRole {
  kReplicated,      // whole on every tp rank (LayerNorm, a loss, or tp = 1)
  kColumn,          // Linear: output features split, output stays split
  kColumnGathered,  // Linear: output features split, output all-gathered
  kRow,             // Linear: input features split, output all-reduced
  kLocalSlice,      // element-wise layer between a column and a row Linear
  kHeads,           // decoder layer: H / tp heads and ffn / tp MLP features per rank
  kVocab,           // token embedding / LM head: V / tp vocabulary rows per rank
};

}  // namespace dst
