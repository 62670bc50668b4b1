// Validation of a caller's batch before any compute: sizes against the
// config's micro-batch and accumulation, buffer counts against the model, and
// every token id and class target against its range. Errors name the call,
// the field, the numbers and the rule.
#pragma once

#include <cstdint>

#include "core/common/status.h"
#include "core/engine/batch.h"
#include "core/model/model_spec.h"

namespace dst {

// Checks `batch` for `call` ("train_batch", ...): a training step takes
// exactly micro x accumulation samples (exact_train), evaluation any positive
// multiple of micro. `row_split`: sequence parallelism's tp size (a GPT
// micro-batch's micro x seq_len token rows must divide by it), else 1.
// Returns the number of micro-batches.
Result<int64_t> CheckBatch(const BatchView &batch, const ModelSpec &spec, int64_t micro,
                           int64_t accum, const char *call, bool exact_train,
                           int64_t row_split = 1);

// The activation sizes a config and a model imply for one micro-batch (rows x
// widest activation, and the attention scores B x heads x T x T), checked
// before anything is allocated: a product that overflows, or one tensor
// larger than this machine's memory, is an error with the numbers rather
// than "out of memory" after a wrapped allocation request.
Status CheckActivationSizes(const ModelSpec &spec, int64_t micro_batch);

}  // namespace dst
