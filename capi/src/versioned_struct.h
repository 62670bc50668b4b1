// The struct_size rules of dstrain.h ("Versioned structs") in one place: which
// sizes a struct accepts, how a caller's struct of another version is read,
// and how an out-struct is filled only as far as both sides know it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "capi/include/dstrain/dstrain.h"

namespace dst::capi {

// Per struct: its name in messages, its first version's size, what to tell a
// caller whose struct_size is out of range, and (for structs the library
// reads) the defaults of fields an older caller's struct lacks.
template <typename S>
struct StructTraits;

template <>
struct StructTraits<dst_engine_options_t> {
  static constexpr const char *kName = "dst_engine_options_t";
  static constexpr size_t kV1Size = DST_ENGINE_OPTIONS_V1_SIZE;
  static constexpr const char *kHint = "initialise it with dst_engine_options_default()";
  static void Default(dst_engine_options_t *s) { dst_engine_options_default(s); }
};

template <>
struct StructTraits<dst_batch_t> {
  static constexpr const char *kName = "dst_batch_t";
  static constexpr size_t kV1Size = DST_BATCH_V1_SIZE;
  static constexpr const char *kHint = "initialise it with dst_batch_default()";
  static void Default(dst_batch_t *s) { dst_batch_default(s); }
};

template <>
struct StructTraits<dst_engine_info_t> {
  static constexpr const char *kName = "dst_engine_info_t";
  static constexpr size_t kV1Size = DST_ENGINE_INFO_V1_SIZE;
  static constexpr const char *kHint = "set it to sizeof(dst_engine_info_t)";
};

template <>
struct StructTraits<dst_tensor_info_t> {
  static constexpr const char *kName = "dst_tensor_info_t";
  static constexpr size_t kV1Size = DST_TENSOR_INFO_V1_SIZE;
  static constexpr const char *kHint = "set it to sizeof(dst_tensor_info_t)";
};

template <>
struct StructTraits<dst_generator_options_t> {
  static constexpr const char *kName = "dst_generator_options_t";
  static constexpr size_t kV1Size = DST_GENERATOR_OPTIONS_V1_SIZE;
  static constexpr const char *kHint = "initialise it with dst_generator_options_default()";
  static void Default(dst_generator_options_t *s) { dst_generator_options_default(s); }
};

template <>
struct StructTraits<dst_sampling_t> {
  static constexpr const char *kName = "dst_sampling_t";
  static constexpr size_t kV1Size = DST_SAMPLING_V1_SIZE;
  static constexpr const char *kHint = "initialise it with dst_sampling_default()";
  static void Default(dst_sampling_t *s) { dst_sampling_default(s); }
};

template <>
struct StructTraits<dst_tokenize_options_t> {
  static constexpr const char *kName = "dst_tokenize_options_t";
  static constexpr size_t kV1Size = DST_TOKENIZE_OPTIONS_V1_SIZE;
  static constexpr const char *kHint = "initialise it with dst_tokenize_options_default()";
  static void Default(dst_tokenize_options_t *s) { dst_tokenize_options_default(s); }
};

// DST_OK when `size` lies in [v1_size, DST_STRUCT_SIZE_MAX]; otherwise
// DST_ERR_INVALID_ARGUMENT with a message naming the call, the argument, the
// struct, the size given and the accepted range.
dst_status_t CheckStructSize(const char *call, const char *arg, const char *type, size_t size,
                             size_t v1_size, size_t library_size, const char *hint);

template <typename S>
dst_status_t CheckStructSize(const S *s, const char *call, const char *arg) {
  using T = StructTraits<S>;
  static_assert(T::kV1Size <= sizeof(S) && sizeof(S) <= DST_STRUCT_SIZE_MAX);
  return CheckStructSize(call, arg, T::kName, s->struct_size, T::kV1Size, sizeof(S), T::kHint);
}

// A struct the caller passes in, as this library knows it: the caller's first
// struct_size bytes over the defaults (an older caller's struct lacks the
// later fields; a newer caller's extra fields are not read).
template <typename S>
dst_status_t ReadStruct(const S *in, const char *call, const char *arg, S *out) {
  if (dst_status_t st = CheckStructSize(in, call, arg); st != DST_OK) return st;
  StructTraits<S>::Default(out);
  std::memcpy(static_cast<void *>(out), in, std::min(in->struct_size, sizeof(S)));
  out->struct_size = sizeof(S);
  return DST_OK;
}

// Fills a struct the caller passes out: the first min(its struct_size, ours)
// bytes of `value`, struct_size set to that count; the rest of the caller's
// struct is left alone.
template <typename S>
dst_status_t WriteStruct(S value, const char *call, const char *arg, S *out) {
  if (dst_status_t st = CheckStructSize(out, call, arg); st != DST_OK) return st;
  const size_t n = std::min(out->struct_size, sizeof(S));
  value.struct_size = n;
  std::memcpy(static_cast<void *>(out), &value, n);
  return DST_OK;
}

}  // namespace dst::capi
