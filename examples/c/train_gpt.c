/*
 * train_gpt: train a small byte-level GPT on a text file through the C ABI, save a checkpoint
 * halfway, and show that resuming from it reproduces the uninterrupted run bit for bit.
 *
 *   train_gpt [--data FILE] [--steps N] [--ckpt DIR]
 *
 *   --data FILE  text to train on (default: the default corpus, Debian's `fortunes`)
 *   --steps N    optimizer steps (default 200)
 *   --ckpt DIR   checkpoint directory (default: train_gpt_ckpt)
 *
 * Build: cc train_gpt.c -I capi/include -L build -ldstrain -Wl,-rpath,build
 * The Rust example sdk-rust/dstrain/examples/train_gpt.rs does the same and prints the same.
 */
#include <dstrain/dstrain.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kSeqLen = 64, kValBatches = 4 };

static const char *kModel =
    "{\"type\": \"gpt\", \"vocab_size\": 256, \"n_ctx\": 64, \"n_layer\": 2, \"n_head\": 4,"
    " \"d_model\": 64, \"seed\": 1}";

/* Any failure ends the program with the library's message; the OS reclaims the handles. */
static void check(dst_status_t status, const char *what) {
  if (status == DST_OK) return;
  fprintf(stderr, "train_gpt: %s: %s: %s\n", what, dst_status_string(status), dst_last_error());
  exit(1);
}

static dst_engine_t *create_engine(const char *config, int64_t steps) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.config_json = config;
  opts.model_json = kModel;
  opts.total_steps = steps; /* resolves "auto" in the LR schedule */
  dst_engine_t *engine = NULL;
  check(dst_engine_create(&engine, &opts), "dst_engine_create");
  return engine;
}

/* Token buffers for one call: n samples of kSeqLen tokens, viewed by a dst_batch_t. */
typedef struct {
  int32_t *tokens, *targets;
  dst_batch_t batch;
} token_batch;

static token_batch make_batch(size_t n) {
  token_batch b;
  b.tokens = calloc(n * kSeqLen, sizeof(int32_t));
  b.targets = calloc(n * kSeqLen, sizeof(int32_t));
  if (!b.tokens || !b.targets) {
    fprintf(stderr, "train_gpt: out of memory\n");
    exit(1);
  }
  dst_batch_default(&b.batch);
  b.batch.n_samples = n;
  b.batch.seq_len = kSeqLen;
  b.batch.tokens = b.tokens;
  b.batch.tokens_count = n * kSeqLen;
  b.batch.targets = b.targets;
  b.batch.targets_count = n * kSeqLen;
  return b;
}

static void fill(token_batch *b, const dst_dataset_t *data, dst_split_t split, uint64_t index) {
  check(dst_dataset_batch(data, split, index, 0, b->batch.n_samples, kSeqLen, b->tokens, b->targets,
                          b->batch.n_samples * kSeqLen),
        "dst_dataset_batch");
}

/* Mean loss over the first kValBatches batches of the validation split. */
static double val_loss(dst_engine_t *engine, const dst_dataset_t *data, token_batch *b) {
  double sum = 0;
  for (uint64_t i = 0; i < kValBatches; ++i) {
    float loss;
    fill(b, data, DST_SPLIT_VAL, i);
    check(dst_engine_eval_batch(engine, &b->batch, &loss), "dst_engine_eval_batch");
    sum += loss;
  }
  return sum / kValBatches;
}

/* Trains steps [from, to); batch `step` of the train split feeds step `step`. */
static float train(dst_engine_t *engine, const dst_dataset_t *data, token_batch *b, int64_t from,
                   int64_t to, int64_t total, int verbose) {
  const int64_t every = total >= 10 ? total / 10 : 1;
  float loss = 0;
  for (int64_t step = from; step < to; ++step) {
    double lr;
    check(dst_engine_learning_rate(engine, &lr), "dst_engine_learning_rate");
    fill(b, data, DST_SPLIT_TRAIN, (uint64_t)step);
    check(dst_engine_train_batch(engine, &b->batch, &loss), "dst_engine_train_batch");
    if (verbose && ((step + 1) % every == 0 || step + 1 == to))
      printf("step %4" PRId64 "/%" PRId64 "  loss %.4f  lr %.6f\n", step + 1, total, loss, lr);
  }
  return loss;
}

int main(int argc, char **argv) {
  const char *data_path = NULL, *ckpt_dir = "train_gpt_ckpt";
  int64_t steps = 200;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--data") && i + 1 < argc) {
      data_path = argv[++i];
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = strtoll(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--ckpt") && i + 1 < argc) {
      ckpt_dir = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--data FILE] [--steps N] [--ckpt DIR]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 2) {
    fprintf(stderr, "train_gpt: --steps must be at least 2\n");
    return 2;
  }

  dst_dataset_t *data = NULL;
  check(dst_dataset_open_text(&data, data_path, 0.1, 1234), "dst_dataset_open_text");
  const char *source;
  size_t n_train, n_val;
  check(dst_dataset_path(data, &source), "dst_dataset_path");
  check(dst_dataset_num_tokens(data, DST_SPLIT_TRAIN, &n_train), "dst_dataset_num_tokens");
  check(dst_dataset_num_tokens(data, DST_SPLIT_VAL, &n_val), "dst_dataset_num_tokens");
  printf("data: %s (%zu train / %zu val tokens)\n", source, n_train, n_val);

  char config[512];
  snprintf(config, sizeof config,
           "{\"train_micro_batch_size_per_gpu\": 8, \"gradient_accumulation_steps\": 1,"
           " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-3, \"betas\": [0.9, "
           "0.95], \"weight_decay\": 0.1}},"
           " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": "
           "\"auto\", \"warmup_num_steps\": %" PRId64
           "}},"
           " \"gradient_clipping\": 1.0}",
           steps / 10);
  dst_engine_t *engine = create_engine(config, steps);
  dst_engine_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  check(dst_engine_get_info(engine, &info), "dst_engine_get_info");
  printf("model: GPT, %" PRId64 " parameters, %" PRId64 " samples x %d tokens per step\n",
         info.num_parameters, info.train_batch_size, kSeqLen);

  const size_t n = (size_t)(info.micro_batch_size * info.grad_accum_steps);
  token_batch batch = make_batch(n);
  printf("val loss %.4f\n", val_loss(engine, data, &batch));

  /* First half, then a checkpoint recording where the data stream stands. */
  const int64_t half = steps / 2;
  train(engine, data, &batch, 0, half, steps, 1);
  char client_state[64];
  snprintf(client_state, sizeof client_state, "{\"next_batch\": %" PRId64 "}", half);
  check(dst_engine_save_checkpoint(engine, ckpt_dir, NULL, client_state),
        "dst_engine_save_checkpoint");
  printf("saved checkpoint global_step%" PRId64 "\n", half);

  /* Second half, uninterrupted. */
  const float final_loss = train(engine, data, &batch, half, steps, steps, 1);
  printf("val loss %.4f\n", val_loss(engine, data, &batch));
  dst_engine_destroy(engine);

  /* A fresh engine resumes from the checkpoint and replays the second half. */
  dst_engine_t *resumed = create_engine(config, steps);
  const char *saved_state;
  check(dst_engine_load_checkpoint(resumed, ckpt_dir, NULL, &saved_state),
        "dst_engine_load_checkpoint");
  const char *next = strstr(saved_state, "\"next_batch\":");
  const int64_t start = next ? strtoll(next + strlen("\"next_batch\":"), NULL, 10) : -1;
  int64_t step_count;
  check(dst_engine_step_count(resumed, &step_count), "dst_engine_step_count");
  printf("resumed at step %" PRId64 " (client state %s)\n", step_count, saved_state);
  if (start != step_count) {
    fprintf(stderr,
            "train_gpt: client state says batch %" PRId64 ", engine says step %" PRId64 "\n", start,
            step_count);
    return 1;
  }
  const float resumed_loss = train(resumed, data, &batch, start, steps, steps, 0);
  const int same = memcmp(&resumed_loss, &final_loss, sizeof(float)) == 0;
  printf("resumed run final loss %.4f: %s the uninterrupted run\n", resumed_loss,
         same ? "bit-identical to" : "DIFFERENT from");

  dst_engine_destroy(resumed);
  dst_dataset_destroy(data);
  free(batch.tokens);
  free(batch.targets);
  return same ? 0 : 1;
}
