/*
 * same_seed: the determinism recipe shared by the C, Rust and Python examples. Five AdamW
 * steps of a tiny GPT on the default corpus, one thread; prints each step's loss as its
 * IEEE-754 bit pattern, so runs (and languages) can be compared as text:
 *
 *   step K loss_bits 0xXXXXXXXX      (K = 0..4; batch K of the train split feeds step K)
 *
 * The Rust twin is sdk-rust/dstrain/examples/same_seed.rs; the test suite checks that both
 * print the same lines.
 */
#include <dstrain/dstrain.h>

#include <stdio.h>
#include <string.h>

enum { kSteps = 5, kSamples = 2, kSeqLen = 16 };

static int fail(const char *what) {
  fprintf(stderr, "same_seed: %s: %s\n", what, dst_last_error());
  return 1;
}

int main(void) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.model_json =
      "{\"type\":\"gpt\",\"vocab_size\":256,\"n_ctx\":16,\"n_layer\":1,\"n_head\":2,"
      "\"d_model\":16,\"seed\":5}";
  opts.config_json =
      "{\"train_micro_batch_size_per_gpu\":2,\"gradient_accumulation_steps\":1,"
      "\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"lr\":1e-3}},"
      "\"dstrain\":{\"num_threads\":1}}";
  dst_engine_t *engine = NULL;
  if (dst_engine_create(&engine, &opts) != DST_OK) return fail("dst_engine_create");
  dst_dataset_t *data = NULL;
  if (dst_dataset_open_text(&data, NULL, 0.1, 7) != DST_OK) {
    dst_engine_destroy(engine);
    return fail("dst_dataset_open_text");
  }

  int32_t tokens[kSamples * kSeqLen], targets[kSamples * kSeqLen];
  dst_batch_t batch;
  dst_batch_default(&batch);
  batch.n_samples = kSamples;
  batch.seq_len = kSeqLen;
  batch.tokens = tokens;
  batch.tokens_count = kSamples * kSeqLen;
  batch.targets = targets;
  batch.targets_count = kSamples * kSeqLen;

  int rc = 0;
  for (int step = 0; step < kSteps && rc == 0; ++step) {
    float loss;
    if (dst_dataset_batch(data, DST_SPLIT_TRAIN, (uint64_t)step, 0, kSamples, kSeqLen, tokens,
                          targets, kSamples * kSeqLen) != DST_OK) {
      rc = fail("dst_dataset_batch");
    } else if (dst_engine_train_batch(engine, &batch, &loss) != DST_OK) {
      rc = fail("dst_engine_train_batch");
    } else {
      uint32_t bits;
      memcpy(&bits, &loss, sizeof bits);
      printf("step %d loss_bits 0x%08x\n", step, (unsigned)bits);
    }
  }
  dst_dataset_destroy(data);
  dst_engine_destroy(engine);
  return rc;
}
