#include <dstrain/dstrain.h>
#include <stdio.h>

int main(void) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.config_json =
      "{\"train_micro_batch_size_per_gpu\": 8,"
      " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-3}}}";
  opts.model_json =
      "{\"type\": \"gpt\", \"vocab_size\": 256, \"n_ctx\": 64,"
      " \"n_layer\": 2, \"n_head\": 4, \"d_model\": 64}";
  dst_engine_t *engine;
  dst_dataset_t *data;
  if (dst_engine_create(&engine, &opts) != DST_OK ||
      dst_dataset_open_text(&data, NULL, 0.1, 1) != DST_OK) { /* NULL: Debian's fortunes */
    fprintf(stderr, "dstrain: %s\n", dst_last_error());
    return 1;
  }
  enum { N = 8, T = 64 }; /* samples per step (micro-batch x accumulation), tokens each */
  static int32_t tokens[N * T], targets[N * T];
  dst_batch_t batch;
  dst_batch_default(&batch);
  batch.n_samples = N;
  batch.seq_len = T;
  batch.tokens = tokens;
  batch.tokens_count = N * T;
  batch.targets = targets;
  batch.targets_count = N * T;
  for (int step = 0; step < 20; ++step) {
    float loss;
    if (dst_dataset_batch(data, DST_SPLIT_TRAIN, step, 0, N, T, tokens, targets, N * T) != DST_OK ||
        dst_engine_train_batch(engine, &batch, &loss) != DST_OK) {
      fprintf(stderr, "dstrain: %s\n", dst_last_error());
      return 1;
    }
    printf("step %d loss %.4f\n", step, loss);
  }
  if (dst_engine_save_checkpoint(engine, "ckpt", NULL, NULL) != DST_OK) /* ckpt/global_step20/ */
    fprintf(stderr, "dstrain: %s\n", dst_last_error());
  dst_dataset_destroy(data);
  dst_engine_destroy(engine);
  return 0;
}
