// ds_config phase 3: batch identity (see config_phases.h).
#include "core/config/config_phases.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config_keys.h"

namespace dst::config_phases {

namespace {

// ---------------------------------------------------------------------------
// Phase 3: batch identity, as DeepSpeed's _set_batch_related_parameters:
// train_batch_size = micro batch * accumulation steps * data-parallel size.

std::optional<int64_t> Multiply(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

Status Overflow(const std::string &what) {
  return ConfigError(what + " overflows a 64-bit integer; the batch keys are far too large");
}

// `total` / `divisor`, where `divisor_text` spells the divisor out for the
// message and `derived` names the key that cannot be derived otherwise.
Result<int64_t> DivideBatch(int64_t total, int64_t divisor, const std::string &divisor_text,
                            std::string_view derived) {
  if (total % divisor == 0) return total / divisor;
  return ConfigError("train_batch_size " + std::to_string(total) + " is not a multiple of " +
                     divisor_text + ", so " + std::string(derived) +
                     " cannot be derived; make train_batch_size a multiple of " +
                     std::to_string(divisor));
}

Result<int64_t> DataParallelSize(const ConfigContext &context, const Config &config) {
  const std::optional<int64_t> model_parallel = Multiply(config.tp_size, config.pp_size);
  if (!model_parallel) return Overflow("tensor-parallel size * pipeline-parallel size");
  if (context.world_size % *model_parallel != 0) {
    return ConfigError("world size " + std::to_string(context.world_size) +
                       " is not divisible by tensor-parallel size " +
                       std::to_string(config.tp_size) + " * pipeline-parallel size " +
                       std::to_string(config.pp_size) + " (= " + std::to_string(*model_parallel) +
                       ")");
  }
  return context.world_size / *model_parallel;
}

}  // namespace

Status ResolveBatch(const BatchKeys &written, const ConfigContext &context, Config *config) {
  Result<int64_t> dp_or = DataParallelSize(context, *config);
  if (!dp_or.ok()) return dp_or.status();
  const int64_t dp = dp_or.value();
  const std::string dp_text = "data-parallel size " + std::to_string(dp);
  const auto micro_text = [](int64_t micro) {
    return "train_micro_batch_size_per_gpu " + std::to_string(micro);
  };
  const auto accum_text = [&written](int64_t accum) {
    return written.accumulation_key + " " + std::to_string(accum);
  };
  const std::optional<int64_t> &tbs = written.train_batch_size;
  const std::optional<int64_t> &micro = written.micro_batch;
  const std::optional<int64_t> &accum = written.accumulation;
  int64_t batch = 0, micro_batch = 0, accumulation = 0;
  if (tbs && micro && accum) {
    batch = *tbs, micro_batch = *micro, accumulation = *accum;
  } else if (tbs && micro) {
    const std::optional<int64_t> divisor = Multiply(*micro, dp);
    if (!divisor) return Overflow(micro_text(*micro) + " * " + dp_text);
    Result<int64_t> derived =
        DivideBatch(*tbs, *divisor,
                    micro_text(*micro) + " * " + dp_text + " (= " + std::to_string(*divisor) + ")",
                    "gradient_accumulation_steps");
    if (!derived.ok()) return derived.status();
    batch = *tbs, micro_batch = *micro, accumulation = derived.value();
  } else if (tbs && accum) {
    const std::optional<int64_t> divisor = Multiply(*accum, dp);
    if (!divisor) return Overflow(accum_text(*accum) + " * " + dp_text);
    Result<int64_t> derived =
        DivideBatch(*tbs, *divisor,
                    accum_text(*accum) + " * " + dp_text + " (= " + std::to_string(*divisor) + ")",
                    "train_micro_batch_size_per_gpu");
    if (!derived.ok()) return derived.status();
    batch = *tbs, micro_batch = derived.value(), accumulation = *accum;
  } else if (tbs) {
    Result<int64_t> derived =
        DivideBatch(*tbs, dp, "the " + dp_text, "train_micro_batch_size_per_gpu");
    if (!derived.ok()) return derived.status();
    batch = *tbs, micro_batch = derived.value(), accumulation = 1;
  } else if (micro) {
    micro_batch = *micro, accumulation = accum.value_or(1);
    const std::optional<int64_t> product = Multiply(micro_batch, accumulation);
    const std::optional<int64_t> total = product ? Multiply(*product, dp) : std::nullopt;
    if (!total) {
      return Overflow(micro_text(micro_batch) + " * " + accum_text(accumulation) + " * " + dp_text);
    }
    batch = *total;
  } else {
    return ConfigError(
        "no batch size: set train_batch_size or train_micro_batch_size_per_gpu (a positive "
        "integer; DeepSpeed needs at least one of them)");
  }
  const std::optional<int64_t> product = Multiply(micro_batch, accumulation);
  const std::optional<int64_t> expected = product ? Multiply(*product, dp) : std::nullopt;
  if (!expected || *expected != batch) {
    return ConfigError("train_batch_size " + std::to_string(batch) +
                       " != " + micro_text(micro_batch) + " * " + accum_text(accumulation) + " * " +
                       dp_text + " (= " + (expected ? std::to_string(*expected) : "overflow") +
                       "); fix one of them or set train_batch_size to \"auto\"");
  }
  config->train_batch_size = batch;
  config->train_micro_batch_size_per_gpu = micro_batch;
  config->gradient_accumulation_steps = accumulation;
  config->dp_size = dp;
  return Status::Ok();
}

}  // namespace dst::config_phases
