// Tensor parallelism (Megatron-style) over the topology's tensor-parallel
// group: how each layer of a model is cut across its tp ranks.
//
// A language model (every decoder family) splits each decoder layer
// Megatron's way (whole query and key/value heads and MLP features per rank:
// core/layers/decoder.h), and its token embedding and LM head by vocabulary
// rows (vocab-parallel embedding and cross-entropy; the vocabulary is padded
// to a multiple of make_vocab_size_divisible_by x tp). n_head,
// num_key_value_heads and the MLP's features must divide by tp.
//
// Sequential models follow Megatron's MLP pattern: consecutive Linear layers
// pair up as column-parallel (the output features split; the input
// gradient's partial sums all-reduced in backward) then row-parallel (the
// input features split; the output's partial sums all-reduced in forward,
// the bias added once after), with only element-wise layers (ReLU, GELU)
// between them, which run on the local slice. A Linear left without a
// partner (the last one, or one followed by a LayerNorm before the next
// Linear) is column-parallel with its output gathered. LayerNorms and the
// loss see whole rows, replicated on every tp rank. Each split width must
// divide by tp: an error names the layer and the numbers.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/status.h"
#include "core/model/model_spec.h"
#include "core/tensor_parallel/tp_group.h"
#include "core/tensor_parallel/tp_role.h"

namespace dst {



// The role of each layer of the whole model (sequential: its layers, then
// the loss) at tensor-parallel size `tp`; all kReplicated at tp = 1.
Result<std::vector<TpRole>> PlanTensorParallel(const ModelSpec &spec, int64_t tp);

}  // namespace dst
