"""The cffi declarations of ``dstrain/dstrain.h`` -- the one place they live.

This text mirrors the header's enums, structs and function prototypes (without
``DST_API``, comments and the macros cffi cannot parse). The test
``tests/python/sdk/test_cdef_drift.py`` parses both with the same small reader
and fails with a diff when a function, enum value or struct field differs, so
a change to the header must be copied here, and the ABI version below bumped
with it.
"""

#: The ABI this package was written against (DST_VERSION_* of dstrain.h).
#: The import-time check requires the loaded library to have the same major
#: version and at least this minor version: the ABI only grows within a major
#: version (docs/abi.md).
DST_VERSION_MAJOR = 0
DST_VERSION_MINOR = 2
DST_VERSION_PATCH = 0

CDEF = r"""
#define DST_MAX_DIMS 4
#define DST_STRUCT_SIZE_MAX 65536

typedef enum dst_status {
  DST_OK = 0,
  DST_ERR_INVALID_ARGUMENT = 1,
  DST_ERR_CONFIG = 2,
  DST_ERR_NOT_SUPPORTED = 3,
  DST_ERR_IO = 4,
  DST_ERR_CHECKPOINT = 5,
  DST_ERR_STATE = 6,
  DST_ERR_OUT_OF_MEMORY = 7,
  DST_ERR_COMM = 8,
  DST_ERR_NUMERIC = 9,
  DST_ERR_INTERNAL = 10,
  DST_ERR_ABORTED = 11
} dst_status_t;

const char *dst_status_string(dst_status_t status);
const char *dst_last_error(void);
const char *dst_version(void);
int dst_version_number(void);
dst_status_t dst_build_info_json(const char **out_json);

typedef struct dst_engine dst_engine_t;

typedef struct dst_engine_options {
  size_t struct_size;
  const char *config_json;
  const char *config_path;
  const char *model_json;
  const char *model_path;
  int64_t total_steps;
} dst_engine_options_t;

void dst_engine_options_default(dst_engine_options_t *options);
dst_status_t dst_engine_create(dst_engine_t **out, const dst_engine_options_t *options);
void dst_engine_destroy(dst_engine_t *engine);
void dst_engine_abort(dst_engine_t *engine);

typedef enum dst_model_type { DST_MODEL_GPT = 1, DST_MODEL_SEQUENTIAL = 2 } dst_model_type_t;

typedef enum dst_loss_type { DST_LOSS_CROSS_ENTROPY = 1, DST_LOSS_MSE = 2 } dst_loss_type_t;

typedef struct dst_engine_info {
  size_t struct_size;
  dst_model_type_t model_type;
  dst_loss_type_t loss_type;
  int64_t num_parameters;
  int64_t train_batch_size;
  int64_t micro_batch_size;
  int64_t grad_accum_steps;
  int64_t dp_size;
  int64_t rank;
  int64_t world_size;
  int64_t seq_len;
  int64_t vocab_size;
  int64_t input_dim;
  int64_t output_dim;
  int64_t dp_rank;
  int64_t pp_size;
  int64_t pp_rank;
  int64_t tp_size;
  int64_t tp_rank;
} dst_engine_info_t;

dst_status_t dst_engine_get_info(const dst_engine_t *engine, dst_engine_info_t *info);

typedef struct dst_batch {
  size_t struct_size;
  size_t n_samples;
  size_t seq_len;
  const int32_t *tokens;
  size_t tokens_count;
  const int32_t *targets;
  size_t targets_count;
  const float *inputs;
  size_t inputs_count;
  const float *labels;
  size_t labels_count;
} dst_batch_t;

void dst_batch_default(dst_batch_t *batch);
dst_status_t dst_engine_train_batch(dst_engine_t *engine, const dst_batch_t *batch,
                                    float *out_loss);
dst_status_t dst_engine_eval_batch(dst_engine_t *engine, const dst_batch_t *batch,
                                   float *out_loss);
dst_status_t dst_engine_forward_backward(dst_engine_t *engine, const dst_batch_t *batch,
                                         float *out_loss);
dst_status_t dst_engine_step_count(const dst_engine_t *engine, int64_t *out_steps);
dst_status_t dst_engine_learning_rate(const dst_engine_t *engine, double *out_lr);
dst_status_t dst_engine_loss_scale(const dst_engine_t *engine, double *out_scale,
                                           int64_t *out_skipped_steps);

typedef struct dst_tensor_info {
  size_t struct_size;
  const char *name;
  int32_t ndim;
  int64_t shape[DST_MAX_DIMS];
  int64_t numel;
} dst_tensor_info_t;

dst_status_t dst_engine_param_count(const dst_engine_t *engine, size_t *out_count);
dst_status_t dst_engine_param_info(const dst_engine_t *engine, size_t index,
                                   dst_tensor_info_t *info);
dst_status_t dst_engine_get_param(const dst_engine_t *engine, const char *name,
                                  float *data, size_t count);
dst_status_t dst_engine_set_param(dst_engine_t *engine, const char *name,
                                  const float *data, size_t count);
dst_status_t dst_engine_get_grad(const dst_engine_t *engine, const char *name,
                                 float *data, size_t count);

dst_status_t dst_engine_save_checkpoint(dst_engine_t *engine, const char *dir,
                                        const char *tag, const char *client_state_json);
dst_status_t dst_engine_load_weights(dst_engine_t *engine, const char *dir, const char *tag);
dst_status_t dst_engine_load_checkpoint(dst_engine_t *engine, const char *dir,
                                        const char *tag, const char **out_client_state);

dst_status_t dst_checkpoint_inspect_json(const char *dir, const char *tag,
                                                 const char **out_json);
dst_status_t dst_checkpoint_export_weights(const char *dir, const char *tag,
                                                   const char *out_path);
dst_status_t dst_checkpoint_export_hf(const char *dir, const char *tag, const char *out_dir,
                                      const char *dtype, const char *max_shard_size);
dst_status_t dst_engine_metrics_json(dst_engine_t *engine, const char **out_json);
dst_status_t dst_engine_memory_status(dst_engine_t *engine, const char **out_json);
dst_status_t dst_engine_config_json(const dst_engine_t *engine, const char **out_json);
dst_status_t dst_engine_monitor_url(const dst_engine_t *engine, const char **out_url);

dst_status_t dst_estimate_memory_json(const dst_engine_options_t *options,
                                      int64_t world_size, const char **out_json);
dst_status_t dst_config_file_read(const char *path, const char **out_text);
dst_status_t dst_io_probe_json(const char *dir, int64_t file_bytes, const char **out_json);
dst_status_t dst_comm_bench_json(const char *config_json, const char *request_json,
                                 const char **out_json);

typedef struct dst_dataset dst_dataset_t;

typedef enum dst_split { DST_SPLIT_TRAIN = 0, DST_SPLIT_VAL = 1 } dst_split_t;

dst_status_t dst_dataset_open_text(dst_dataset_t **out, const char *path,
                                   double val_fraction, uint64_t seed);
dst_status_t dst_dataset_open_tokens(dst_dataset_t **out, const char *path,
                                     double val_fraction, uint64_t seed);
dst_status_t dst_dataset_max_token(const dst_dataset_t *dataset, int64_t *out_max);
void dst_dataset_destroy(dst_dataset_t *dataset);
dst_status_t dst_dataset_num_tokens(const dst_dataset_t *dataset, dst_split_t split,
                                    size_t *out_tokens);
dst_status_t dst_dataset_path(const dst_dataset_t *dataset, const char **out_path);
dst_status_t dst_dataset_batch(const dst_dataset_t *dataset, dst_split_t split,
                               uint64_t batch_index, uint64_t first_sample,
                               size_t n_samples, size_t seq_len, int32_t *tokens,
                               int32_t *targets, size_t count);
dst_status_t dst_dataset_read(const dst_dataset_t *dataset, dst_split_t split,
                              size_t offset, int32_t *tokens, size_t count);

typedef struct dst_generator dst_generator_t;

typedef struct dst_generator_options {
  size_t struct_size;
  const char *checkpoint_dir;
  const char *checkpoint_tag;
  const char *model_json;
  const char *model_path;
  int64_t context;
  int64_t batch;
  int32_t num_threads;
  const char *precision;
} dst_generator_options_t;

void dst_generator_options_default(dst_generator_options_t *options);
dst_status_t dst_generator_create(dst_generator_t **out,
                                  const dst_generator_options_t *options);
void dst_generator_destroy(dst_generator_t *generator);
dst_status_t dst_generator_info_json(const dst_generator_t *generator,
                                     const char **out_json);
dst_status_t dst_generator_logits(dst_generator_t *generator, const int32_t *tokens,
                                  size_t n_seqs, size_t seq_len, float *logits,
                                  size_t logits_count);
dst_status_t dst_generator_loss(dst_generator_t *generator, const int32_t *tokens,
                                const int32_t *targets, size_t n_seqs, size_t seq_len,
                                double *out_loss, int64_t *out_counted);

typedef struct dst_sampling {
  size_t struct_size;
  int64_t max_new_tokens;
  double temperature;
  int64_t top_k;
  double top_p;
  uint64_t seed;
  int32_t use_cache;
  int32_t stop_at_eos;
} dst_sampling_t;

void dst_sampling_default(dst_sampling_t *sampling);
typedef int (*dst_token_callback_t)(void *user_data, int32_t token);
dst_status_t dst_generator_generate(dst_generator_t *generator, const int32_t *prompt,
                                    size_t prompt_len, const dst_sampling_t *sampling,
                                    dst_token_callback_t on_token, void *user_data,
                                    int32_t *out_tokens, size_t out_capacity,
                                    size_t *out_count, const char **out_stop_reason);

typedef struct dst_tokenizer dst_tokenizer_t;

dst_status_t dst_tokenizer_open(dst_tokenizer_t **out, const char *path);
void dst_tokenizer_destroy(dst_tokenizer_t *tokenizer);
dst_status_t dst_tokenizer_info_json(const dst_tokenizer_t *tokenizer,
                                     const char **out_json);
dst_status_t dst_tokenizer_encode(const dst_tokenizer_t *tokenizer, const char *text,
                                  size_t length, int add_special,
                                  const int32_t **out_ids, size_t *out_count);
dst_status_t dst_tokenizer_decode(const dst_tokenizer_t *tokenizer, const int32_t *ids,
                                  size_t n, const char **out_text, size_t *out_length);

typedef struct dst_tokenize_options {
  size_t struct_size;
  int32_t num_threads;
  double val_fraction;
  int32_t eos_after_files;
  int32_t add_special;
  int64_t chunk_bytes;
} dst_tokenize_options_t;

void dst_tokenize_options_default(dst_tokenize_options_t *options);
typedef void (*dst_progress_callback_t)(void *user_data, int64_t done, int64_t total);
dst_status_t dst_tokenize_files(const dst_tokenizer_t *tokenizer, const char *const *files,
                                size_t n_files, const char *out_path,
                                const char *val_out_path,
                                const dst_tokenize_options_t *options,
                                dst_progress_callback_t progress, void *user_data,
                                const char **out_json);
"""
