#include "core/engine/batch_check.h"

#include <unistd.h>
#include <algorithm>

#include <limits>
#include <string>
#include <vector>

namespace dst {

namespace {

Status CheckTokenRange(const int32_t *ids, size_t count, int64_t limit, bool allow_ignore,
                       const char *what, const char *call) {
  for (size_t i = 0; i < count; ++i) {
    const int32_t id = ids[i];
    if ((id >= 0 && id < limit) || (allow_ignore && id == -1)) continue;
    return InvalidArgument(std::string(call) + ": " + what + "[" + std::to_string(i) + "] = " +
                           std::to_string(id) + " is outside [0, " + std::to_string(limit) + ")" +
                           (allow_ignore ? " (or -1 to ignore)" : ""));
  }
  return Status::Ok();
}

Status CheckCount(const char *call, const char *name, const void *ptr, size_t given,
                  size_t expected, const char *formula) {
  if (!ptr)
    return InvalidArgument(std::string(call) + ": batch." + name + " is NULL; this model needs " +
                           std::string(formula) + " = " + std::to_string(expected) + " values");
  if (given != expected)
    return InvalidArgument(std::string(call) + ": batch." + name + "_count is " +
                           std::to_string(given) + " but " + std::string(formula) + " = " +
                           std::to_string(expected));
  return Status::Ok();
}
// a * b for sizes a caller supplied, or an error with both numbers when the
// product does not fit (instead of a wrapped count that might match).
Result<size_t> CheckedProduct(const char *call, const char *formula, int64_t a, int64_t b) {
  if (a < 0 || b < 0 || (b != 0 && a > std::numeric_limits<int64_t>::max() / b))
    return InvalidArgument(std::string(call) + ": " + formula + " = " + std::to_string(a) + " x " +
                           std::to_string(b) + " does not fit in 64 bits");
  return size_t(a * b);
}

}  // namespace

Status CheckActivationSizes(const ModelSpec &spec, int64_t micro) {
  // One activation tensor larger than the machine's memory cannot be held.
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const int64_t memory = pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : INT64_MAX;
  const int64_t kMaxElements = memory / int64_t(sizeof(float));
  struct Product {
    std::string what;
    std::vector<int64_t> factors;
  };
  std::vector<Product> products;
  if (spec.IsLanguageModel()) {
    const TransformerSpec &g = spec.lm;
    const int64_t qkv = (g.n_head + 2 * g.kv_heads()) * g.head_size();
    const int64_t widest = std::max({g.ffn_size(), qkv, g.d_model, g.vocab});
    products.push_back(
        {"train_micro_batch_size_per_gpu x n_ctx x max(the MLP's features, vocab_size)",
         {micro, g.n_ctx, widest}});
    products.push_back({"train_micro_batch_size_per_gpu x n_head x n_ctx x n_ctx",
                        {micro, g.n_head, g.n_ctx, g.n_ctx}});
  } else {
    int64_t widest = spec.input_dim;
    for (const SequentialLayerSpec &l : spec.layers) widest = std::max(widest, l.out_features);
    products.push_back({"train_micro_batch_size_per_gpu x the widest layer", {micro, widest}});
  }
  for (const Product &p : products) {
    int64_t total = 1;
    std::string numbers;
    bool overflow = false;
    for (int64_t f : p.factors) {
      numbers += (numbers.empty() ? "" : " x ") + std::to_string(f);
      overflow |= __builtin_mul_overflow(total, f, &total);
    }
    if (overflow || total > kMaxElements)
      return ConfigError("one micro-batch's activations would need " + p.what + " = " + numbers +
                         (overflow ? " elements, more than 64 bits hold"
                                   : " = " + std::to_string(total) +
                                         " fp32 values, more than "
                                         "this machine's " +
                                         std::to_string(memory) + " bytes of memory") +
                         "; lower train_micro_batch_size_per_gpu or the model's sizes");
  }
  return Status::Ok();
}

Result<int64_t> CheckBatch(const BatchView &b, const ModelSpec &spec, int64_t micro, int64_t accum,
                           const char *call, bool exact_train, int64_t row_split) {
  if (b.n_samples > size_t(std::numeric_limits<int64_t>::max()))
    return InvalidArgument(std::string(call) + ": n_samples is " + std::to_string(b.n_samples) +
                           ", more than any buffer can hold");
  const int64_t n = int64_t(b.n_samples);
  if (exact_train && n != micro * accum)
    return InvalidArgument(
        std::string(call) + ": n_samples is " + std::to_string(n) +
        " but one optimizer step on this rank takes train_micro_batch_size_per_gpu " +
        std::to_string(micro) + " x gradient_accumulation_steps " + std::to_string(accum) + " = " +
        std::to_string(micro * accum));
  if (!exact_train && (n <= 0 || n % micro != 0))
    return InvalidArgument(std::string(call) + ": n_samples is " + std::to_string(n) +
                           "; it must be a positive multiple of train_micro_batch_size_per_gpu " +
                           std::to_string(micro));
  if (spec.IsLanguageModel()) {
    const int64_t T = int64_t(b.seq_len);
    if (T < 1 || T > spec.lm.n_ctx)
      return InvalidArgument(std::string(call) + ": seq_len is " + std::to_string(T) +
                             "; it must be in [1, n_ctx = " + std::to_string(spec.lm.n_ctx) + "]");
    if ((micro * T) % row_split != 0)
      return InvalidArgument(
          std::string(call) + ": tensor_parallel.sequence_parallel splits each micro-batch's " +
          "train_micro_batch_size_per_gpu x seq_len = " + std::to_string(micro) + " x " +
          std::to_string(T) + " = " + std::to_string(micro * T) + " token rows over tp_size " +
          std::to_string(row_split) + " ranks, which does not divide them; use a seq_len (or " +
          "micro-batch size) whose product with the other is a multiple of " +
          std::to_string(row_split));
    const char *formula = "n_samples x seq_len";
    Result<size_t> product = CheckedProduct(call, formula, n, T);
    if (!product.ok()) return product.status();
    const size_t want = product.value();
    DST_RETURN_IF_ERROR(CheckCount(call, "tokens", b.tokens, b.tokens_count, want, formula));
    DST_RETURN_IF_ERROR(CheckCount(call, "targets", b.targets, b.targets_count, want, formula));
    DST_RETURN_IF_ERROR(CheckTokenRange(b.tokens, want, spec.lm.vocab, false, "tokens", call));
    DST_RETURN_IF_ERROR(CheckTokenRange(b.targets, want, spec.lm.vocab, true, "targets", call));
  } else {
    if (micro % row_split != 0)
      return InvalidArgument(
          std::string(call) + ": tensor_parallel.sequence_parallel splits each micro-batch's " +
          "rows (train_micro_batch_size_per_gpu = " + std::to_string(micro) +
          " samples) over tp_size " + std::to_string(row_split) +
          " ranks, which does not divide them; use a micro-batch size that is a multiple of " +
          std::to_string(row_split));
    Result<size_t> inputs = CheckedProduct(call, "n_samples x input_dim", n, spec.input_dim);
    if (!inputs.ok()) return inputs.status();
    DST_RETURN_IF_ERROR(CheckCount(call, "inputs", b.inputs, b.inputs_count, inputs.value(),
                                   "n_samples x input_dim"));
    const int64_t out = spec.SequentialOutputDim();
    if (spec.loss == ModelSpec::Loss::kMse) {
      Result<size_t> labels = CheckedProduct(call, "n_samples x output_dim", n, out);
      if (!labels.ok()) return labels.status();
      DST_RETURN_IF_ERROR(CheckCount(call, "labels", b.labels, b.labels_count, labels.value(),
                                     "n_samples x output_dim"));
    } else {
      DST_RETURN_IF_ERROR(
          CheckCount(call, "targets", b.targets, b.targets_count, size_t(n), "n_samples"));
      DST_RETURN_IF_ERROR(CheckTokenRange(b.targets, size_t(n), out, true, "targets", call));
    }
  }
  return n / micro;
}

}  // namespace dst
