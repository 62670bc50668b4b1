/*
 * Prints what the C compiler makes of dstrain.h: struct sizes, alignments, field offsets and
 * sizes, enum sizes and signedness, constants. build.rs compiles and runs this program and the
 * layout test compares every line with the Rust declarations. One "key value" pair per line.
 */
#include <dstrain/dstrain.h>
#include <stddef.h>
#include <stdio.h>

#define SIZE(T) printf("sizeof %s %lld\n", #T, (long long)sizeof(T))
#define ALIGN(T)                                                                     \
  do {                                                                               \
    struct align_probe_##T {                                                         \
      char c;                                                                        \
      T t;                                                                           \
    };                                                                               \
    printf("alignof %s %lld\n", #T, (long long)offsetof(struct align_probe_##T, t)); \
  } while (0)
#define FIELD(T, f)                                                           \
  do {                                                                        \
    printf("offsetof %s.%s %lld\n", #T, #f, (long long)offsetof(T, f));       \
    printf("fieldsize %s.%s %lld\n", #T, #f, (long long)sizeof(((T *)0)->f)); \
  } while (0)
#define ENUM(T)                                        \
  do {                                                 \
    SIZE(T);                                           \
    printf("signed %s %d\n", #T, (int)((T)-1 < (T)0)); \
  } while (0)
#define CONST(c) printf("const %s %lld\n", #c, (long long)(c))

int main(void) {
  SIZE(size_t);

  ENUM(dst_status_t);
  CONST(DST_OK);
  CONST(DST_ERR_INVALID_ARGUMENT);
  CONST(DST_ERR_CONFIG);
  CONST(DST_ERR_NOT_SUPPORTED);
  CONST(DST_ERR_IO);
  CONST(DST_ERR_CHECKPOINT);
  CONST(DST_ERR_STATE);
  CONST(DST_ERR_OUT_OF_MEMORY);
  CONST(DST_ERR_COMM);
  CONST(DST_ERR_NUMERIC);
  CONST(DST_ERR_INTERNAL);
  CONST(DST_ERR_ABORTED);

  CONST(DST_VERSION_MAJOR);
  CONST(DST_VERSION_MINOR);
  CONST(DST_VERSION_PATCH);
  CONST(DST_VERSION_NUMBER);
  printf("string DST_VERSION_STRING %s\n", DST_VERSION_STRING);
  CONST(DST_MAX_DIMS);
  CONST(DST_STRUCT_SIZE_MAX);
  CONST(DST_ENGINE_OPTIONS_V1_SIZE);
  CONST(DST_ENGINE_INFO_V1_SIZE);
  CONST(DST_BATCH_V1_SIZE);
  CONST(DST_TENSOR_INFO_V1_SIZE);
  CONST(DST_GENERATOR_OPTIONS_V1_SIZE);
  CONST(DST_SAMPLING_V1_SIZE);
  CONST(DST_TOKENIZE_OPTIONS_V1_SIZE);

  ENUM(dst_model_type_t);
  CONST(DST_MODEL_GPT);
  CONST(DST_MODEL_SEQUENTIAL);
  ENUM(dst_loss_type_t);
  CONST(DST_LOSS_CROSS_ENTROPY);
  CONST(DST_LOSS_MSE);
  ENUM(dst_split_t);
  CONST(DST_SPLIT_TRAIN);
  CONST(DST_SPLIT_VAL);

  SIZE(dst_engine_options_t);
  ALIGN(dst_engine_options_t);
  FIELD(dst_engine_options_t, struct_size);
  FIELD(dst_engine_options_t, config_json);
  FIELD(dst_engine_options_t, config_path);
  FIELD(dst_engine_options_t, model_json);
  FIELD(dst_engine_options_t, model_path);
  FIELD(dst_engine_options_t, total_steps);

  SIZE(dst_engine_info_t);
  ALIGN(dst_engine_info_t);
  FIELD(dst_engine_info_t, struct_size);
  FIELD(dst_engine_info_t, model_type);
  FIELD(dst_engine_info_t, loss_type);
  FIELD(dst_engine_info_t, num_parameters);
  FIELD(dst_engine_info_t, train_batch_size);
  FIELD(dst_engine_info_t, micro_batch_size);
  FIELD(dst_engine_info_t, grad_accum_steps);
  FIELD(dst_engine_info_t, dp_size);
  FIELD(dst_engine_info_t, rank);
  FIELD(dst_engine_info_t, world_size);
  FIELD(dst_engine_info_t, seq_len);
  FIELD(dst_engine_info_t, vocab_size);
  FIELD(dst_engine_info_t, input_dim);
  FIELD(dst_engine_info_t, output_dim);
  FIELD(dst_engine_info_t, dp_rank);
  FIELD(dst_engine_info_t, pp_size);
  FIELD(dst_engine_info_t, pp_rank);
  FIELD(dst_engine_info_t, tp_size);
  FIELD(dst_engine_info_t, tp_rank);

  SIZE(dst_batch_t);
  ALIGN(dst_batch_t);
  FIELD(dst_batch_t, struct_size);
  FIELD(dst_batch_t, n_samples);
  FIELD(dst_batch_t, seq_len);
  FIELD(dst_batch_t, tokens);
  FIELD(dst_batch_t, tokens_count);
  FIELD(dst_batch_t, targets);
  FIELD(dst_batch_t, targets_count);
  FIELD(dst_batch_t, inputs);
  FIELD(dst_batch_t, inputs_count);
  FIELD(dst_batch_t, labels);
  FIELD(dst_batch_t, labels_count);

  SIZE(dst_tensor_info_t);
  ALIGN(dst_tensor_info_t);
  FIELD(dst_tensor_info_t, struct_size);
  FIELD(dst_tensor_info_t, name);
  FIELD(dst_tensor_info_t, ndim);
  FIELD(dst_tensor_info_t, shape);
  FIELD(dst_tensor_info_t, numel);

  SIZE(dst_generator_options_t);
  ALIGN(dst_generator_options_t);
  FIELD(dst_generator_options_t, struct_size);
  FIELD(dst_generator_options_t, checkpoint_dir);
  FIELD(dst_generator_options_t, checkpoint_tag);
  FIELD(dst_generator_options_t, model_json);
  FIELD(dst_generator_options_t, model_path);
  FIELD(dst_generator_options_t, context);
  FIELD(dst_generator_options_t, batch);
  FIELD(dst_generator_options_t, num_threads);
  FIELD(dst_generator_options_t, precision);

  SIZE(dst_sampling_t);
  ALIGN(dst_sampling_t);
  FIELD(dst_sampling_t, struct_size);
  FIELD(dst_sampling_t, max_new_tokens);
  FIELD(dst_sampling_t, temperature);
  FIELD(dst_sampling_t, top_k);
  FIELD(dst_sampling_t, top_p);
  FIELD(dst_sampling_t, seed);
  FIELD(dst_sampling_t, use_cache);
  FIELD(dst_sampling_t, stop_at_eos);

  SIZE(dst_tokenize_options_t);
  ALIGN(dst_tokenize_options_t);
  FIELD(dst_tokenize_options_t, struct_size);
  FIELD(dst_tokenize_options_t, num_threads);
  FIELD(dst_tokenize_options_t, val_fraction);
  FIELD(dst_tokenize_options_t, eos_after_files);
  FIELD(dst_tokenize_options_t, add_special);
  FIELD(dst_tokenize_options_t, chunk_bytes);
  return 0;
}
