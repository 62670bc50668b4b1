/*
 * same_sample: generation's determinism recipe shared by the C, Rust and Python SDKs. A tiny
 * LLaMA-style model (its seeded weights) continues the prompt 1, 2, 3 with 16 tokens sampled
 * at temperature 0.8, top-k 20, top-p 0.9, seed 42, then 8 greedy tokens, one thread:
 *
 *   sample K id N      (K = 0..15)
 *   greedy K id N      (K = 0..7)
 *
 * The Rust twin is sdk-rust/dstrain/examples/same_sample.rs, the Python one in
 * tests/python/test_generation.py; the test suite checks that all print the same lines.
 */
#include <dstrain/dstrain.h>

#include <stdio.h>

static const char kModel[] =
    "{\"type\":\"llama\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":64,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
    "\"max_position_embeddings\":64,\"initializer_range\":0.5,\"seed\":11}";

static int fail(const char *what) {
  fprintf(stderr, "same_sample: %s: %s\n", what, dst_last_error());
  return 1;
}

static int print(const char *label, dst_generator_t *g, const dst_sampling_t *s) {
  const int32_t prompt[3] = {1, 2, 3};
  int32_t tokens[16];
  size_t n = 0;
  if (dst_generator_generate(g, prompt, 3, s, NULL, NULL, tokens, 16, &n, NULL) != DST_OK)
    return fail("dst_generator_generate");
  for (size_t k = 0; k < n; ++k) printf("%s %zu id %d\n", label, k, (int)tokens[k]);
  return 0;
}

int main(void) {
  dst_generator_options_t opts;
  dst_generator_options_default(&opts);
  opts.model_json = kModel;
  opts.num_threads = 1;
  dst_generator_t *g = NULL;
  if (dst_generator_create(&g, &opts) != DST_OK) return fail("dst_generator_create");
  dst_sampling_t s;
  dst_sampling_default(&s);
  s.max_new_tokens = 16;
  s.temperature = 0.8;
  s.top_k = 20;
  s.top_p = 0.9;
  s.seed = 42;
  int rc = print("sample", g, &s);
  s.max_new_tokens = 8;
  s.temperature = 0.0;
  if (rc == 0) rc = print("greedy", g, &s);
  dst_generator_destroy(g);
  return rc;
}
