// dst_generator_*: the C ABI over dst::Generator (core/generation).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi/src/capi_util.h"
#include "capi/src/versioned_struct.h"
#include "core/generation/generator.h"

// The opaque handle behind dst_generator_t.
struct dst_generator {
  std::unique_ptr<dst::Generator> generator;
  std::string info_json;
};

namespace {

std::string OrEmpty(const char *s) {
  return s != nullptr ? s : "";
}

dst_status_t CheckShape(const char *call, dst_generator_t *g, size_t n_seqs, size_t seq_len) {
  if (n_seqs == 0 || seq_len == 0 || n_seqs > size_t(g->generator->batch()) ||
      seq_len > size_t(g->generator->context()))
    return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT,
                           std::string(call) + ": " + std::to_string(n_seqs) + " x " +
                               std::to_string(seq_len) + " tokens; the generator takes 1.." +
                               std::to_string(g->generator->batch()) +
                               " sequences (its batch) of 1.." +
                               std::to_string(g->generator->context()) + " tokens (its context)");
  return DST_OK;
}

}  // namespace

extern "C" {

void dst_generator_options_default(dst_generator_options_t *options) {
  if (options == nullptr) return;
  *options = dst_generator_options_t{};
  options->struct_size = sizeof(dst_generator_options_t);
}

void dst_sampling_default(dst_sampling_t *sampling) {
  if (sampling == nullptr) return;
  *sampling = dst_sampling_t{};
  sampling->struct_size = sizeof(dst_sampling_t);
  sampling->max_new_tokens = 64;
  sampling->temperature = 1.0;
  sampling->top_p = 1.0;
  sampling->use_cache = 1;
  sampling->stop_at_eos = 1;
}

dst_status_t dst_generator_create(dst_generator_t **out, const dst_generator_options_t *options) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(out);
  *out = nullptr;
  DST_CAPI_REQUIRE_NONNULL(options);
  dst_generator_options_t o;
  if (dst_status_t st = dst::capi::ReadStruct(options, __func__, "options", &o); st != DST_OK)
    return st;
  const int sources =
      (o.checkpoint_dir != nullptr) + (o.model_json != nullptr) + (o.model_path != nullptr);
  if (sources != 1)
    return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT,
                           std::string(__func__) +
                               ": set exactly one of checkpoint_dir, model_json and model_path "
                               "(got " +
                               std::to_string(sources) + ")");
  dst::GeneratorOptions g;
  g.checkpoint = OrEmpty(o.checkpoint_dir);
  g.tag = OrEmpty(o.checkpoint_tag);
  g.model = o.model_json != nullptr ? std::string(o.model_json) : OrEmpty(o.model_path);
  if (o.model_path != nullptr && g.model.empty())
    return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT,
                           std::string(__func__) + ": model_path is empty");
  g.context = o.context;
  g.batch = o.batch > 0 ? o.batch : 1;
  g.threads = o.num_threads;
  if (o.precision != nullptr) g.precision = o.precision;
  dst::Result<std::unique_ptr<dst::Generator>> opened = dst::Generator::Open(g);
  if (!opened.ok()) {
    dst::Status st = opened.status();
    return dst::capi::FromStatus(st.context("opening a generator"));
  }
  auto handle = std::make_unique<dst_generator>();
  handle->generator = std::move(opened).value();
  const dst::Generator &gen = *handle->generator;
  nlohmann::json info = {
      {"model_type", dst::ModelTypeName(gen.spec().type)},
      {"vocab_size", gen.vocab()},
      {"context", gen.context()},
      {"batch", gen.batch()},
      {"eos_token_ids", std::vector<int32_t>(gen.eos().begin(), gen.eos().end())},
      {"precision", g.precision},
      {"model_spec", nlohmann::json::parse(gen.spec().canonical_json, nullptr, false)}};
  handle->info_json = info.dump();
  *out = handle.release();
  return DST_OK;
  DST_CAPI_END
}

void dst_generator_destroy(dst_generator_t *generator) {
  delete generator;
}

dst_status_t dst_generator_info_json(const dst_generator_t *generator, const char **out_json) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(generator);
  DST_CAPI_REQUIRE_NONNULL(out_json);
  *out_json = generator->info_json.c_str();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_generator_logits(dst_generator_t *generator, const int32_t *tokens, size_t n_seqs,
                                  size_t seq_len, float *logits, size_t logits_count) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(generator);
  DST_CAPI_REQUIRE_NONNULL(tokens);
  DST_CAPI_REQUIRE_NONNULL(logits);
  if (dst_status_t st = CheckShape(__func__, generator, n_seqs, seq_len); st != DST_OK) return st;
  const size_t expected = n_seqs * seq_len * size_t(generator->generator->vocab());
  if (logits_count != expected)
    return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT,
                           std::string(__func__) + ": logits_count is " +
                               std::to_string(logits_count) + ", expected n_seqs x seq_len x " +
                               "vocab_size = " + std::to_string(expected));
  return dst::capi::FromStatus(
      generator->generator->Logits(tokens, int64_t(n_seqs), int64_t(seq_len), logits));
  DST_CAPI_END
}

dst_status_t dst_generator_loss(dst_generator_t *generator, const int32_t *tokens,
                                const int32_t *targets, size_t n_seqs, size_t seq_len,
                                double *out_loss, int64_t *out_counted) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(generator);
  DST_CAPI_REQUIRE_NONNULL(tokens);
  DST_CAPI_REQUIRE_NONNULL(targets);
  DST_CAPI_REQUIRE_NONNULL(out_loss);
  if (dst_status_t st = CheckShape(__func__, generator, n_seqs, seq_len); st != DST_OK) return st;
  int64_t counted = 0;
  dst::Result<double> loss =
      generator->generator->Loss(tokens, targets, int64_t(n_seqs), int64_t(seq_len), &counted);
  if (!loss.ok()) return dst::capi::FromStatus(loss.status());
  *out_loss = loss.value();
  if (out_counted) *out_counted = counted;
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_generator_generate(dst_generator_t *generator, const int32_t *prompt,
                                    size_t prompt_len, const dst_sampling_t *sampling,
                                    dst_token_callback_t on_token, void *user_data,
                                    int32_t *out_tokens, size_t out_capacity, size_t *out_count,
                                    const char **out_stop_reason) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(generator);
  DST_CAPI_REQUIRE_NONNULL(prompt);
  if (out_count) *out_count = 0;
  dst_sampling_t s;
  if (sampling != nullptr) {
    if (dst_status_t st = dst::capi::ReadStruct(sampling, __func__, "sampling", &s); st != DST_OK)
      return st;
  } else {
    dst_sampling_default(&s);
  }
  if (out_tokens != nullptr && s.max_new_tokens > 0 && out_capacity < size_t(s.max_new_tokens))
    return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT,
                           std::string(__func__) + ": out_capacity is " +
                               std::to_string(out_capacity) + " but max_new_tokens is " +
                               std::to_string(s.max_new_tokens) +
                               "; pass a buffer of at least max_new_tokens (or NULL)");
  dst::GenerateOptions g;
  g.max_new_tokens = s.max_new_tokens;
  g.sampling = {s.temperature, s.top_k, s.top_p, s.seed};
  g.use_cache = s.use_cache != 0;
  g.stop_at_eos = s.stop_at_eos != 0;
  size_t written = 0;
  const auto each = [&](int32_t token) {
    if (out_tokens) out_tokens[written] = token;
    ++written;
    if (out_count) *out_count = written;
    return on_token == nullptr || on_token(user_data, token) == 0;
  };
  dst::Result<dst::Generated> r =
      generator->generator->Generate(std::vector<int32_t>(prompt, prompt + prompt_len), g, each);
  if (!r.ok()) return dst::capi::FromStatus(r.status());
  if (out_stop_reason) *out_stop_reason = dst::StopReasonName(r->stop);
  return DST_OK;
  DST_CAPI_END
}

}  // extern "C"
