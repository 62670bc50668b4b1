// dst_tokenizer_* and dst_tokenize_files: the C ABI over core/tokenizer.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capi/src/capi_util.h"
#include "capi/src/versioned_struct.h"
#include "core/runtime/threads.h"
#include "core/tokenizer/token_file.h"

// The opaque handle behind dst_tokenizer_t.
struct dst_tokenizer {
  std::unique_ptr<dst::Tokenizer> tokenizer;
  std::string info_json;
};

namespace {
thread_local std::vector<int32_t> g_ids;
thread_local std::string g_text;
thread_local std::string g_report;
}  // namespace

extern "C" {

dst_status_t dst_tokenizer_open(dst_tokenizer_t **out, const char *path) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(out);
  *out = nullptr;
  DST_CAPI_REQUIRE_NONNULL(path);
  dst::Result<std::unique_ptr<dst::Tokenizer>> t = dst::Tokenizer::Open(path);
  if (!t.ok()) {
    dst::Status st = t.status();
    return dst::capi::FromStatus(st.context("opening the tokenizer " + std::string(path)));
  }
  auto handle = std::make_unique<dst_tokenizer>();
  handle->tokenizer = std::move(t).value();
  const dst::Tokenizer &k = *handle->tokenizer;
  handle->info_json = nlohmann::json{
      {"kind", k.kind()},
      {"vocab_size", k.vocab_size()},
      {"bos_id", k.bos_id()},
      {"eos_id",
       k.eos_id()}}.dump();
  *out = handle.release();
  return DST_OK;
  DST_CAPI_END
}

void dst_tokenizer_destroy(dst_tokenizer_t *tokenizer) {
  delete tokenizer;
}

dst_status_t dst_tokenizer_info_json(const dst_tokenizer_t *tokenizer, const char **out_json) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(tokenizer);
  DST_CAPI_REQUIRE_NONNULL(out_json);
  *out_json = tokenizer->info_json.c_str();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_tokenizer_encode(const dst_tokenizer_t *tokenizer, const char *text, size_t length,
                                  int add_special, const int32_t **out_ids, size_t *out_count) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(tokenizer);
  if (length > 0) DST_CAPI_REQUIRE_NONNULL(text);
  DST_CAPI_REQUIRE_NONNULL(out_ids);
  DST_CAPI_REQUIRE_NONNULL(out_count);
  g_ids.clear();
  tokenizer->tokenizer->Encode(std::string_view(text ? text : "", length), add_special != 0,
                               &g_ids);
  *out_ids = g_ids.data();
  *out_count = g_ids.size();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_tokenizer_decode(const dst_tokenizer_t *tokenizer, const int32_t *ids, size_t n,
                                  const char **out_text, size_t *out_length) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(tokenizer);
  if (n > 0) DST_CAPI_REQUIRE_NONNULL(ids);
  DST_CAPI_REQUIRE_NONNULL(out_text);
  g_text = tokenizer->tokenizer->Decode(ids, n);
  *out_text = g_text.c_str();
  if (out_length) *out_length = g_text.size();
  return DST_OK;
  DST_CAPI_END
}

void dst_tokenize_options_default(dst_tokenize_options_t *options) {
  if (options == nullptr) return;
  *options = dst_tokenize_options_t{};
  options->struct_size = sizeof(dst_tokenize_options_t);
  options->val_fraction = 0.05;
  options->eos_after_files = 1;
  options->chunk_bytes = 16 << 10;
}

dst_status_t dst_tokenize_files(const dst_tokenizer_t *tokenizer, const char *const *files,
                                size_t n_files, const char *out_path, const char *val_out_path,
                                const dst_tokenize_options_t *options,
                                dst_progress_callback_t progress, void *user_data,
                                const char **out_json) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(tokenizer);
  DST_CAPI_REQUIRE_NONNULL(files);
  DST_CAPI_REQUIRE_NONNULL(out_path);
  dst_tokenize_options_t o;
  if (options) {
    if (dst_status_t st = dst::capi::ReadStruct(options, __func__, "options", &o); st != DST_OK)
      return st;
  } else {
    dst_tokenize_options_default(&o);
  }
  if (o.chunk_bytes < 1)
    return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT,
                           std::string(__func__) + ": chunk_bytes must be at least 1");
  std::vector<std::string> paths;
  for (size_t i = 0; i < n_files; ++i) {
    DST_CAPI_REQUIRE_NONNULL(files[i]);
    paths.emplace_back(files[i]);
  }
  dst::TokenizeOptions t;
  t.threads = o.num_threads > 0 ? o.num_threads : dst::ResolveNumThreads(0);
  t.val_fraction = o.val_fraction;
  t.eos_after_files = o.eos_after_files != 0;
  t.add_special = o.add_special != 0;
  t.chunk_bytes = size_t(o.chunk_bytes);
  dst::TokenizeProgress report_progress;
  if (progress)
    report_progress = [&](int64_t done, int64_t total) { progress(user_data, done, total); };
  dst::Result<dst::TokenizeReport> r = dst::TokenizeFiles(
      *tokenizer->tokenizer, paths, out_path, val_out_path ? val_out_path : "", t, report_progress);
  if (!r.ok()) return dst::capi::FromStatus(r.status());
  g_report = nlohmann::json{{"bytes", r->bytes},
                            {"train_tokens", r->train_tokens},
                            {"val_tokens", r->val_tokens},
                            {"version", r->version},
                            {"seconds", r->seconds}}
                 .dump();
  if (out_json) *out_json = g_report.c_str();
  return DST_OK;
  DST_CAPI_END
}

}  // extern "C"
