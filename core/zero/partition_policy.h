// The ZeRO partition policy of one rank's tensors under a config, in one
// place for the three that need it: the engine (DataParallel's partition
// plan), the layout memory figures (LayoutMemory) and `dstrain estimate`
// (MemoryReportJson). Which tensors stay whole on every rank because of their
// layer type (stage 3's zero_allowed_param_types / zero_force_param_types),
// which keep fp32 values and gradients under 16-bit training (the
// fp16/bf16 override modules), and how many elements stage 3 keeps whole.
#pragma once

#include <cstdint>
#include <vector>

#include "core/config/config.h"
#include "core/layers/params.h"
#include "core/model/model_spec.h"

namespace dst {

struct PartitionPolicy {
  std::vector<bool> whole_by_type;    // per declaration (WholeByParamType)
  std::vector<bool> fp32;             // per declaration (Fp32ByParamType)
  int64_t fp32_elements = 0;          // the fp32 tensors' elements
  int64_t persistence_threshold = 0;  // zero_optimization.stage3_param_persistence_threshold
  // Stage 3's tensors kept whole on every rank (PersistentElements: at most
  // the threshold, or whole by type; never an fp32 one), whatever the stage.
  int64_t stage3_persistent_elements = 0;
};

// The policy for a rank holding `decls` (its stage's tensor slices).
PartitionPolicy PartitionPolicyFor(const ModelSpec &spec, const std::vector<ParamDecl> &decls,
                                   const Config &config);

// The 1-bit optimizers' worker and server error feedback per rank (optimizer
// state): each tensor's, padded (1-bit LAMB: of all of them as one); 0 for
// other optimizers or one data-parallel rank.
int64_t OneBitResidualBytes(const Config &config, const std::vector<ParamDecl> &decls);

}  // namespace dst
