// dst_dataset_*: the C ABI over dst::TextDataset.
#include <cstring>
#include <string>
#include <utility>

#include "capi/src/capi_util.h"
#include "core/data/text_dataset.h"

// The opaque handle behind dst_dataset_t.
struct dst_dataset {
  dst::TextDataset text;
};

namespace {

// The split as the caller passed it. A C caller may pass any int; reading it
// as the enum (whose values are 0 and 1) would be undefined in C++, so its
// bytes are read as an int.
int SplitValue(const dst_split_t &split) {
  static_assert(sizeof(dst_split_t) == sizeof(int));
  int value = 0;
  std::memcpy(&value, &split, sizeof value);
  return value;
}

bool IsKnownSplit(int split) {
  return split == DST_SPLIT_TRAIN || split == DST_SPLIT_VAL;
}

dst_status_t UnknownSplit(const char *function, int split) {
  return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT, std::string(function) + ": unknown split " +
                                                       std::to_string(split) +
                                                       "; use DST_SPLIT_TRAIN or DST_SPLIT_VAL");
}

dst::Split ToSplit(int split) {
  return split == DST_SPLIT_VAL ? dst::Split::kVal : dst::Split::kTrain;
}

// Checks that `count` is n_samples * seq_len (without overflowing).
dst_status_t CheckBatchCount(size_t n_samples, size_t seq_len, size_t count) {
  size_t expected = 0;
  const bool overflow = __builtin_mul_overflow(n_samples, seq_len, &expected);
  if (!overflow && count == expected) return DST_OK;
  const std::string expected_text = overflow ? "more than SIZE_MAX" : std::to_string(expected);
  return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT,
                         "dst_dataset_batch: count is " + std::to_string(count) +
                             " but n_samples * seq_len = " + std::to_string(n_samples) + " * " +
                             std::to_string(seq_len) + " = " + expected_text +
                             "; pass the element count of the tokens and targets buffers");
}

}  // namespace

extern "C" {

dst_status_t dst_dataset_open_text(dst_dataset_t **out, const char *path, double val_fraction,
                                   uint64_t seed) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(out);
  *out = nullptr;
  dst::Result<dst::TextDataset> opened =
      dst::TextDataset::Open(path != nullptr ? path : "", val_fraction, seed);
  if (!opened.ok()) {
    dst::Status status = opened.status();
    return dst::capi::FromStatus(status.context("dst_dataset_open_text"));
  }
  *out = new dst_dataset{std::move(opened).value()};
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_dataset_open_tokens(dst_dataset_t **out, const char *path, double val_fraction,
                                     uint64_t seed) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(out);
  DST_CAPI_REQUIRE_NONNULL(path);
  *out = nullptr;
  dst::Result<dst::TextDataset> opened = dst::TextDataset::OpenTokens(path, val_fraction, seed);
  if (!opened.ok()) {
    dst::Status status = opened.status();
    return dst::capi::FromStatus(status.context("dst_dataset_open_tokens"));
  }
  *out = new dst_dataset{std::move(opened).value()};
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_dataset_max_token(const dst_dataset_t *dataset, int64_t *out_max) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(dataset);
  DST_CAPI_REQUIRE_NONNULL(out_max);
  *out_max = dataset->text.max_token();
  return DST_OK;
  DST_CAPI_END
}

void dst_dataset_destroy(dst_dataset_t *dataset) {
  delete dataset;
}

dst_status_t dst_dataset_num_tokens(const dst_dataset_t *dataset, dst_split_t split,
                                    size_t *out_tokens) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(dataset);
  DST_CAPI_REQUIRE_NONNULL(out_tokens);
  const int which = SplitValue(split);
  if (!IsKnownSplit(which)) return UnknownSplit(__func__, which);
  *out_tokens = dataset->text.num_tokens(ToSplit(which));
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_dataset_path(const dst_dataset_t *dataset, const char **out_path) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(dataset);
  DST_CAPI_REQUIRE_NONNULL(out_path);
  *out_path = dataset->text.path().c_str();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_dataset_batch(const dst_dataset_t *dataset, dst_split_t split,
                               uint64_t batch_index, uint64_t first_sample, size_t n_samples,
                               size_t seq_len, int32_t *tokens, int32_t *targets, size_t count) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(dataset);
  DST_CAPI_REQUIRE_NONNULL(tokens);
  DST_CAPI_REQUIRE_NONNULL(targets);
  const int which = SplitValue(split);
  if (!IsKnownSplit(which)) return UnknownSplit(__func__, which);
  if (dst_status_t status = CheckBatchCount(n_samples, seq_len, count); status != DST_OK) {
    return status;
  }
  const dst::BatchRequest request{ToSplit(which), batch_index, first_sample, n_samples, seq_len};
  const dst::BatchBuffers buffers{{tokens, count}, {targets, count}};
  dst::Status status = dataset->text.Batch(request, buffers);
  return dst::capi::FromStatus(status.context("dst_dataset_batch"));
  DST_CAPI_END
}

dst_status_t dst_dataset_read(const dst_dataset_t *dataset, dst_split_t split, size_t offset,
                              int32_t *tokens, size_t count) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(dataset);
  if (count > 0) DST_CAPI_REQUIRE_NONNULL(tokens);
  const int which = SplitValue(split);
  if (!IsKnownSplit(which)) return UnknownSplit(__func__, which);
  return dst::capi::FromStatus(
      dataset->text.Read(ToSplit(which), offset, std::span<int32_t>(tokens, count))
          .context("dst_dataset_read"));
  DST_CAPI_END
}

}  // extern "C"
