/*
 * dstrain.h — the one public header of libdstrain.
 *
 * dstrain is a distributed training engine configured by a DeepSpeed-style
 * ds_config.json. This header is plain C99 and is the stable ABI: every call
 * returns a dst_status_t (DST_OK == 0), results come back through out
 * parameters, structs passed by pointer begin with `size_t struct_size` and
 * grow only at the end, and C++ exceptions never cross this boundary.
 *
 * Errors: when a call returns anything but DST_OK, dst_last_error() returns a
 * thread-local message that names what failed, where, and what to do.
 *
 * Versioned structs (dst_engine_options_t, dst_batch_t, dst_engine_info_t,
 * dst_tensor_info_t): struct_size is the size of the struct as the caller was
 * compiled, so a program built against an older or a newer header keeps
 * working with this library.
 *   - Set it to sizeof(the struct), or initialise the struct with its _INIT
 *     macro or its _default function (see there).
 *   - Accepted: DST_<STRUCT>_V1_SIZE (the first version of the struct, defined
 *     after each struct) to DST_STRUCT_SIZE_MAX. Anything else is
 *     DST_ERR_INVALID_ARGUMENT naming the struct, the size given and the range.
 *   - Structs the library reads (options, batch): only the first struct_size
 *     bytes are read; fields the caller's struct lacks take their defaults
 *     (those of the _default function), and trailing fields this library does
 *     not know are ignored.
 *   - Structs the library fills (info structs): only the first
 *     min(struct_size, the library's size) bytes are written, and struct_size
 *     is set to the number of bytes written; anything after them in the
 *     caller's struct is left as it was.
 *
 * Thread safety: functions that take no handle are safe from any thread. Calls
 * on one dst_engine_t or dst_dataset_t must not run concurrently, except
 * dst_engine_abort, which may be called from another thread to stop a running
 * call (see there); different handles may be used from different threads,
 * but the BLAS thread pool is process-wide, so two engines training at once
 * share the cores. An engine notices the misuse it can: a call made while
 * another call on the same engine is running on another thread is refused
 * with DST_ERR_STATE (nothing is run, nothing is lost), and a call on a
 * handle already passed to dst_engine_destroy, or on a pointer that never
 * was an engine, returns DST_ERR_INVALID_ARGUMENT (DST_ERR_ABORTED after
 * dst_engine_abort) (the
 * library keeps the set of live engines and never reads through a pointer
 * outside it); a second destroy of such a handle, or a destroy while another
 * thread's call is running, does nothing. Beyond that (a destroyed handle
 * whose address a later dst_engine_create returned again: it is that new
 * engine; overlapping calls on a dst_dataset_t) the behaviour is undefined.
 *
 * Multi-process jobs: dst_engine_create, dst_engine_train_batch,
 * dst_engine_eval_batch, dst_engine_forward_backward, dst_engine_save_checkpoint
 * and dst_engine_load_checkpoint must be called by every rank, in the same
 * order (so must dst_engine_get_param at ZeRO stage 3; see there).
 * dst_engine_destroy says goodbye to the other ranks and may wait for them
 * (bounded by comm_timeout_seconds); after a rank has failed,
 * dst_engine_abort tears the engine down without waiting for anyone.
 *
 * Strings returned by the library are owned by the library and stay valid as
 * stated per function.
 */
#ifndef DSTRAIN_DSTRAIN_H
#define DSTRAIN_DSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DSTRAIN_BUILDING_LIBRARY is defined only while libdstrain itself is
 * compiled (by its CMake target): the library exports the functions, programs
 * using it import them. */
#if defined(_WIN32)
#if defined(DSTRAIN_BUILDING_LIBRARY)
#define DST_API __declspec(dllexport)
#else
#define DST_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define DST_API __attribute__((visibility("default")))
#else
#define DST_API
#endif

#define DST_VERSION_MAJOR 0
#define DST_VERSION_MINOR 2
#define DST_VERSION_PATCH 0
#define DST_VERSION_NUMBER (DST_VERSION_MAJOR * 10000 + DST_VERSION_MINOR * 100 + DST_VERSION_PATCH)
#define DST_VERSION_STRING "0.2.0"

/* The largest struct_size a versioned struct may have (see the top of this
 * file): a larger value is taken for an uninitialised struct_size. */
#define DST_STRUCT_SIZE_MAX 65536

/* ------------------------------------------------------------------------- */
/* Status codes                                                               */
/* ------------------------------------------------------------------------- */

typedef enum dst_status {
  DST_OK = 0,
  DST_ERR_INVALID_ARGUMENT = 1, /* NULL handle or buffer, wrong size, bad value */
  DST_ERR_CONFIG = 2,           /* ds_config or model spec is malformed or inconsistent */
  DST_ERR_NOT_SUPPORTED = 3,    /* recognised but not built yet */
  DST_ERR_IO = 4,               /* file could not be read or written */
  DST_ERR_CHECKPOINT = 5,       /* checkpoint missing, corrupt or not matching the model */
  DST_ERR_STATE = 6,            /* call in the wrong order */
  DST_ERR_OUT_OF_MEMORY = 7,    /* an allocation failed */
  DST_ERR_COMM = 8,             /* a collective failed or timed out */
  DST_ERR_NUMERIC = 9,          /* non-finite loss or gradients */
  DST_ERR_INTERNAL = 10,        /* a bug in dstrain: please report it */
  DST_ERR_ABORTED = 11          /* dst_engine_abort was called while the call ran */
} dst_status_t;

/* Static, never NULL: "ok", "invalid argument", ... */
DST_API const char *dst_status_string(dst_status_t status);

/* The message of the last failed call on this thread ("" if none). Valid
 * until the next failing call on the same thread. */
DST_API const char *dst_last_error(void);

/* Run-time version: "0.2.0" and DST_VERSION_NUMBER of the loaded library. */
DST_API const char *dst_version(void);
DST_API int dst_version_number(void);

/* A JSON object describing the build: version, compiler, build type, BLAS and
 * its thread count, CPU features used, whether CUDA / NCCL are compiled in,
 * devices seen. Static storage, valid for the life of the process. */
DST_API dst_status_t dst_build_info_json(const char **out_json);

/* ------------------------------------------------------------------------- */
/* Engine                                                                     */
/* ------------------------------------------------------------------------- */

typedef struct dst_engine dst_engine_t;

typedef struct dst_engine_options {
  size_t struct_size;      /* set by dst_engine_options_default */
  const char *config_json; /* ds_config as a JSON string, or NULL */
  const char *config_path; /* ... or a path to ds_config.json (exactly one of the two) */
  const char *model_json;  /* model spec as a JSON string, or NULL */
  const char *model_path;  /* ... or a path to it (exactly one of the two) */
  int64_t total_steps;     /* resolves "auto" in scheduler.params.total_num_steps; 0 = unknown */
} dst_engine_options_t;

/* The size of the first version of dst_engine_options_t. */
#define DST_ENGINE_OPTIONS_V1_SIZE (offsetof(dst_engine_options_t, total_steps) + sizeof(int64_t))

/* Fills *options with defaults (all NULL / 0) and struct_size: the loaded
 * library's sizeof(dst_engine_options_t), which matches the caller's struct
 * when header and library are of the same version (the SDKs check the version
 * when they load the library). A program that may meet a newer library than
 * its header initialises with DST_ENGINE_OPTIONS_INIT instead, sized by its
 * own header: dst_engine_options_t options = DST_ENGINE_OPTIONS_INIT; */
DST_API void dst_engine_options_default(dst_engine_options_t *options);
#define DST_ENGINE_OPTIONS_INIT \
  { sizeof(dst_engine_options_t), NULL, NULL, NULL, NULL, 0 }

/* Builds the model, allocates parameters, gradients, optimizer state and
 * activation buffers, and initialises weights from the model spec's seed.
 * On failure *out is set to NULL.
 *
 * In a multi-process job (RANK/WORLD_SIZE, Open MPI or Slurm variables in the
 * environment) it also joins the job: rank 0 hosts the rendezvous store at
 * MASTER_ADDR:MASTER_PORT, every rank checks it runs the same config, and the
 * data-parallel group connects. A process that has not installed its own
 * SIGPIPE handler gets SIGPIPE ignored, so that a dead peer becomes an error
 * naming the lost rank instead of killing this process. */
DST_API dst_status_t dst_engine_create(dst_engine_t **out, const dst_engine_options_t *options);

/* Frees everything the engine owns (and stops its metrics server). NULL is a
 * no-op. In a multi-process job it first closes in step with the others: each
 * rank posts "closing" to the rendezvous store and waits (at most 30 s, and at
 * most comm_timeout_seconds) until every other rank is closing or gone, and
 * rank 0, whose process hosts the store, then waits (at most
 * comm_timeout_seconds) until every other rank has left. The first wait is
 * skipped once a train, eval or forward_backward step has failed (a call
 * refused for its arguments does not count). */
DST_API void dst_engine_destroy(dst_engine_t *engine);

/* Like dst_engine_destroy, but waits for no other rank, as ncclCommAbort does:
 * for a caller that has seen a peer fail (an error from a collective call, or
 * word from its launcher) and must not block on it. The connections to the
 * other ranks are closed at once, without the closing handshake, without rank
 * 0's wait for the others, and on rank 0 the rendezvous store stops, so the
 * other ranks' pending calls fail at once. The engine is freed; the handle is
 * dead: a later call with it returns DST_ERR_ABORTED and a later
 * dst_engine_destroy of it does nothing (its address is never handed out
 * again, so a thread or an SDK object still holding it cannot reach another
 * engine). NULL is a no-op.
 *
 * From any thread, also while another thread's call on the engine runs (as
 * ncclCommAbort gets a thread out of a collective that will never
 * complete): that call returns DST_ERR_ABORTED within about a second when
 * it waits on another rank (a collective, a pipeline exchange, a gather, the
 * rendezvous store), or at its next instruction when it computes; calls
 * made afterwards return DST_ERR_ABORTED; dst_engine_abort returns once the
 * running call has returned and the engine is freed. The other ranks waiting
 * on this one fail within about a second with DST_ERR_COMM naming it
 * ("rank N aborted"). A read or write of the NVMe offload files already
 * submitted to the kernel is finished first (it cannot be cancelled). A
 * call on another rank blocked in a single store write to a stalled rank 0
 * returns at its timeout.
 *
 * Not async-signal-safe (it takes a lock and frees memory): a signal handler
 * must not call it. The pattern for SIGINT/SIGTERM is a watchdog thread: the
 * handler only posts a semaphore (sem_post is async-signal-safe) or writes
 * to a pipe, and the thread waiting on it calls dst_engine_abort (see
 * examples/c/abort_on_signal.c). Should it be called on the thread that is
 * inside the call anyway, it cannot wait for that call: it only asks the
 * call to stop (DST_ERR_ABORTED) and leaves the handle to
 * dst_engine_destroy, which then closes without any handshake. */
DST_API void dst_engine_abort(dst_engine_t *engine);

typedef enum dst_model_type { DST_MODEL_GPT = 1, DST_MODEL_SEQUENTIAL = 2 } dst_model_type_t;

typedef enum dst_loss_type { DST_LOSS_CROSS_ENTROPY = 1, DST_LOSS_MSE = 2 } dst_loss_type_t;

/* What a caller needs to shape its batches. */
typedef struct dst_engine_info {
  size_t struct_size;
  dst_model_type_t model_type;
  dst_loss_type_t loss_type;
  int64_t num_parameters;   /* trainable scalars (tied weights counted once) */
  int64_t train_batch_size; /* global samples per optimizer step */
  int64_t micro_batch_size; /* samples per micro-step per rank */
  int64_t grad_accum_steps; /* micro-steps per optimizer step */
  int64_t dp_size;          /* data-parallel ranks */
  int64_t rank;             /* this process's global rank */
  int64_t world_size;       /* processes in the job */
  int64_t seq_len;          /* GPT: maximum context (n_ctx); sequential: 0 */
  int64_t vocab_size;       /* GPT: vocabulary; sequential: 0 */
  int64_t input_dim;        /* sequential: features per sample; GPT: 0 */
  int64_t output_dim;       /* sequential: outputs (classes) per sample; GPT: vocab */
  /* Version 2: where this rank sits in the (pp, dp, tp) grid. A data loader
   * takes its slice of each global batch by dp_rank (every pipeline stage of
   * one data-parallel replica passes the same samples). */
  int64_t dp_rank;
  int64_t pp_size; /* pipeline stages */
  int64_t pp_rank; /* this rank's stage */
  int64_t tp_size; /* tensor-parallel ranks */
  int64_t tp_rank;
} dst_engine_info_t;

/* The size of the first version of dst_engine_info_t. */
#define DST_ENGINE_INFO_V1_SIZE (offsetof(dst_engine_info_t, output_dim) + sizeof(int64_t))

/* Fills *info: set info->struct_size to sizeof(dst_engine_info_t) first; on
 * return it holds the number of bytes written (see the top of this file). */
DST_API dst_status_t dst_engine_get_info(const dst_engine_t *engine, dst_engine_info_t *info);

/* One call's samples. For train_batch, n_samples must equal
 * micro_batch_size * grad_accum_steps (the rank's share of the global batch);
 * for eval_batch and forward_backward any multiple of micro_batch_size is
 * accepted. Every *_count is the element count of its buffer and is checked.
 *
 *   GPT:                      tokens  [n_samples, seq_len] int32 in [0, vocab)
 *                             targets [n_samples, seq_len] int32 in [0, vocab), or -1 to ignore
 *   sequential, MSE:          inputs  [n_samples, input_dim] float
 *                             labels  [n_samples, output_dim] float
 *   sequential, cross-entropy: inputs [n_samples, input_dim] float
 *                             targets [n_samples] int32 class ids
 */
typedef struct dst_batch {
  size_t struct_size;
  size_t n_samples;
  size_t seq_len; /* GPT: tokens per sample, 1..n_ctx; sequential: 0 */
  const int32_t *tokens;
  size_t tokens_count;
  const int32_t *targets;
  size_t targets_count;
  const float *inputs;
  size_t inputs_count;
  const float *labels;
  size_t labels_count;
} dst_batch_t;

/* The size of the first version of dst_batch_t. */
#define DST_BATCH_V1_SIZE (offsetof(dst_batch_t, labels_count) + sizeof(size_t))

/* Zeroes *batch and sets its struct size (the loaded library's, as for
 * dst_engine_options_default; DST_BATCH_INIT is sized by the caller's header). */
DST_API void dst_batch_default(dst_batch_t *batch);
#define DST_BATCH_INIT \
  { sizeof(dst_batch_t), 0, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0 }

/* One optimizer step: forward and backward over grad_accum_steps micro-batches
 * (gradients averaged over them and over the data-parallel ranks), clipping,
 * optimizer update, LR schedule step. *out_loss (may be NULL) receives the
 * mean loss over the micro-batches of every data-parallel rank (the same
 * value on every rank). */
DST_API dst_status_t dst_engine_train_batch(dst_engine_t *engine, const dst_batch_t *batch,
                                            float *out_loss);

/* Forward only, no state change. *out_loss (may be NULL) receives the mean
 * loss, over every data-parallel rank as for train_batch. */
DST_API dst_status_t dst_engine_eval_batch(dst_engine_t *engine, const dst_batch_t *batch,
                                           float *out_loss);

/* Forward and backward without an optimizer step: leaves the gradients (mean
 * over the micro-batches of every data-parallel rank, before clipping)
 * readable with dst_engine_get_grad. Does not advance the step count.
 * *out_loss (may be NULL) as for eval_batch. */
DST_API dst_status_t dst_engine_forward_backward(dst_engine_t *engine, const dst_batch_t *batch,
                                                 float *out_loss);

/* Optimizer steps taken so far. */
DST_API dst_status_t dst_engine_step_count(const dst_engine_t *engine, int64_t *out_steps);

/* The learning rate the next optimizer step will use. */
DST_API dst_status_t dst_engine_learning_rate(const dst_engine_t *engine, double *out_lr);

/* fp16 training: the current loss scale and the optimizer steps skipped so
 * far because the gradients overflowed (scale 1 and 0 skipped under fp32 and
 * bf16). Either out pointer may be NULL. */
DST_API dst_status_t dst_engine_loss_scale(const dst_engine_t *engine, double *out_scale,
                                           int64_t *out_skipped_steps);

/* ------------------------------------------------------------------------- */
/* Parameters                                                                 */
/* ------------------------------------------------------------------------- */

#define DST_MAX_DIMS 4

typedef struct dst_tensor_info {
  size_t struct_size;
  const char *name; /* e.g. "transformer.h.0.attn.c_attn.weight"; owned by the engine */
  int32_t ndim;
  int64_t shape[DST_MAX_DIMS];
  int64_t numel;
} dst_tensor_info_t;

/* The size of the first version of dst_tensor_info_t. */
#define DST_TENSOR_INFO_V1_SIZE (offsetof(dst_tensor_info_t, numel) + sizeof(int64_t))

/* Number of named parameter tensors (a tied weight is listed once). */
DST_API dst_status_t dst_engine_param_count(const dst_engine_t *engine, size_t *out_count);

/* Describes parameter tensor `index` (0 <= index < count). Set
 * info->struct_size first, as for dst_engine_get_info. */
DST_API dst_status_t dst_engine_param_info(const dst_engine_t *engine, size_t index,
                                           dst_tensor_info_t *info);

/* Copies a parameter (or its gradient) out of / into the engine. `count` is
 * the element count of `data` and must equal the tensor's numel.
 * At ZeRO stage 3 with several ranks a tensor lives in shards: every rank must
 * call get_param for the same tensors in the same order (it gathers them);
 * tensors of at most stage3_param_persistence_threshold elements are read
 * locally. set_param: pass the same data on every rank (each keeps its part;
 * ZeroOneAdam's local steps accumulated over the tensor restart, so the ranks
 * join at the next synchronisation).
 * get_grad: at ZeRO stages 2 and 3 the full gradient exists only after
 * dst_engine_forward_backward (gathered into a temporary, counted as gradient
 * memory, freed when the next step begins); after train_batch it returns
 * DST_ERR_STATE. */
DST_API dst_status_t dst_engine_get_param(const dst_engine_t *engine, const char *name, float *data,
                                          size_t count);
DST_API dst_status_t dst_engine_set_param(dst_engine_t *engine, const char *name, const float *data,
                                          size_t count);
DST_API dst_status_t dst_engine_get_grad(const dst_engine_t *engine, const char *name, float *data,
                                         size_t count);

/* ------------------------------------------------------------------------- */
/* Checkpoints                                                                */
/* ------------------------------------------------------------------------- */

/* Writes DIR/TAG/ and then DIR/latest (a text file holding TAG). DIR/TAG/
 * holds model.safetensors (the consolidated fp32 weights: the master weights
 * under fp16/bf16), zero_rank_<r>.safetensors (the part of the optimizer state
 * rank r held, and its part of the weights where the weights are sharded; at
 * ZeRO stage 0, with the state replicated, only rank 0 writes one) and
 * meta.json (step, optimizer, LR schedule, loss scaler, RNG seeds, config,
 * model spec, topology, client state, and every file's size and checksum).
 * The directory is written as DIR/.TAG.tmp and renamed into place (a previous
 * DIR/TAG is replaced only then), so an interrupted save leaves the previous
 * checkpoint intact. Every rank must call it with the same arguments (the
 * ranks agree through the rendezvous store). `tag` NULL means "global_stepN"
 * with N the step count; a tag must not contain '/'. `client_state_json` (may
 * be NULL; must be valid JSON) is stored in meta.json and returned by load
 * re-serialised compactly (DeepSpeed's client_state). */
DST_API dst_status_t dst_engine_save_checkpoint(dst_engine_t *engine, const char *dir,
                                                const char *tag, const char *client_state_json);

/* Restores weights, optimizer state, step, LR schedule and loss scaler from
 * DIR/TAG (tag NULL or "": the tag named in DIR/latest), verifying every
 * file's checksum; nothing changes unless every rank could load its part.
 * Every rank must call it. A checkpoint saved with another world size, ZeRO
 * stage or precision loads too (resharded). *out_client_state (may be NULL)
 * receives the saved client state ("null" if none), valid until the next load
 * on the engine. With the same layout and thread count, training continued
 * after a load is bit-identical to the uninterrupted run. */
DST_API dst_status_t dst_engine_load_checkpoint(dst_engine_t *engine, const char *dir,
                                                const char *tag, const char **out_client_state);

/* Only the weights of DIR/TAG (model.safetensors; tag NULL or "": DIR/latest),
 * verified by their checksums, with names and shapes matching this model:
 * no optimizer state, step, schedule or loss scale, and no comparison of the
 * model specs. dst_engine_load_checkpoint refuses a checkpoint saved from a
 * model that computes differently (another n_head, say); this is how to ask
 * for its weights anyway. Every rank must call it; nothing changes unless
 * every rank could read them. The optimizer's moments stay as they were;
 * each rank's own state (compression residuals, 1-bit errors, 0/1 Adam's
 * accumulated local steps), which belonged to the weights replaced, starts
 * afresh. */
DST_API dst_status_t dst_engine_load_weights(dst_engine_t *engine, const char *dir,
                                             const char *tag);

/* Checkpoints on disk, without an engine (what `dstrain ckpt` uses). `tag`
 * NULL or "" means the tag named by DIR/latest. Thread-safe. */

/* A JSON description of DIR/TAG: {path, tag, format_version, dstrain_version,
 * step, precision, num_parameters, topology, optimizer, lr_scheduler,
 * loss_scaler, rng, client_state, shards: [{file, rank, begin, end, tensors}],
 * own_states: [{rank, file, tensors: {name: numel}, scalars}] (where ranks
 * keep state of their own: compression residuals, 1-bit errors, ...),
 * tensors: [{name, dtype, shape, numel}] (the consolidated weights), files:
 * [{name, bytes, checksum, verified, error}], total_bytes, valid}. Every file
 * is verified against its checksum; a failing file sets "valid": false and
 * names the problem in its "error" instead of failing the call. The string is
 * thread-local, valid until the next call on the same thread. */
DST_API dst_status_t dst_checkpoint_inspect_json(const char *dir, const char *tag,
                                                 const char **out_json);

/* Writes the checkpoint's consolidated fp32 weights (verified first) to
 * `out_path` as one safetensors file (loadable by safetensors/torch),
 * atomically. */
DST_API dst_status_t dst_checkpoint_export_weights(const char *dir, const char *tag,
                                                   const char *out_path);

/* Writes the checkpoint as a Hugging Face model directory `out_dir` (which
 * must not exist or be empty; the files appear together): config.json,
 * generation_config.json and the weights in the family's Hugging Face names
 * and layouts as model.safetensors, or as shards of at most max_shard_size
 * ("5GB", "500MB", "2GiB" or a byte count, as transformers' max_shard_size;
 * NULL: "5GB") with model.safetensors.index.json. dtype: "fp32", "bf16" or
 * "fp16" (NULL: "fp32"). A checkpoint of any layout gives the same files; a
 * sequential model has no Hugging Face form (DST_ERR_NOT_SUPPORTED). */
DST_API dst_status_t dst_checkpoint_export_hf(const char *dir, const char *tag,
                                              const char *out_dir, const char *dtype,
                                              const char *max_shard_size);

/* ------------------------------------------------------------------------- */
/* Metrics and configuration                                                  */
/* ------------------------------------------------------------------------- */

/* A JSON snapshot of this rank: step, loss, lr, grad_norm, tokens/s,
 * samples/s, seconds per phase (forward, backward, reduce, step) for the last
 * step and in total, bytes per memory category (parameters, gradients,
 * optimizer_state, activations, communication, offload) current and peak,
 * communication totals per collective, loss scale and skipped steps, among
 * others. Valid until the next dst_engine_metrics_json on the engine. */
DST_API dst_status_t dst_engine_metrics_json(dst_engine_t *engine, const char **out_json);

/* This rank's memory now, as DeepSpeed's memory_status / see_memory_usage
 * report it, as JSON: {"categories": {"parameters": {"bytes", "peak_bytes"},
 * ... gradients, optimizer_state, activations, communication, offload},
 * "total": {"bytes", "peak_bytes"}, "process": {"rss_bytes",
 * "peak_rss_bytes"}, "system": {"total_bytes", "available_bytes"}}. Peaks
 * count from the end of dst_engine_create. Valid until the next
 * dst_engine_memory_status on the engine. */
DST_API dst_status_t dst_engine_memory_status(dst_engine_t *engine, const char **out_json);

/* The resolved configuration ("auto" filled in) as JSON. Valid for the life of
 * the engine. */
DST_API dst_status_t dst_engine_config_json(const dst_engine_t *engine, const char **out_json);

/* The address of this rank's metrics server and dashboard, e.g.
 * "http://127.0.0.1:9401/" (Prometheus text at ".../metrics", JSON at
 * ".../api/v1/"), or "" when dstrain.monitor.http is off. The server starts
 * with the engine when the config enables it and stops when the engine is
 * destroyed. Valid for the life of the engine. */
DST_API dst_status_t dst_engine_monitor_url(const dst_engine_t *engine, const char **out_url);

/* Per-rank model-state memory (bytes) for each ZeRO stage 0-3 at `world_size`
 * ranks, for the config and model in `options` (nothing is allocated; no job
 * is joined): a JSON object {num_parameters, world_size, dp_size, precision,
 * optimizer_state_bytes_per_parameter, configured_stage, stages: [{stage,
 * parameters_bytes, gradients_bytes, optimizer_state_bytes, total_bytes,
 * persistent_parameters, fp32_parameters, supported}]} (fp32_parameters:
 * elements kept in fp32 by fp16/bf16_override_modules). The figures are exactly
 * what a run of that layout allocates (flat buffers padded to a multiple of
 * dp_size). The string is thread-local, valid until the next call on the
 * same thread. */
DST_API dst_status_t dst_estimate_memory_json(const dst_engine_options_t *options,
                                              int64_t world_size, const char **out_json);

/* Reads a config or model-spec file exactly as dst_engine_create and
 * dst_estimate_memory_json do: a regular file of at most 16 MiB; a
 * directory, a FIFO or a device (such as /dev/zero) is refused by name
 * (DST_ERR_IO) rather than blocking or filling memory. *out_text is
 * thread-local, valid until the next call on the same thread. */
DST_API dst_status_t dst_config_file_read(const char *path, const char **out_text);

/* Sequential write and read bandwidth of the file system under `dir` through
 * the NVMe offload tier's own I/O path (O_DIRECT where the file system has
 * it; io_uring, else pread/pwrite), for aio block sizes 128 KiB, 1 MiB, 8 MiB
 * and queue depths 1, 8, 32: a JSON object {path, engine, direct_io,
 * file_bytes, results: [{block_size, queue_depth, write_bytes_per_second,
 * read_bytes_per_second}], best, suggested_config: {"aio": {block_size,
 * queue_depth}}}. Writes a temporary file of `file_bytes` (0: 128 MiB) nine
 * times, then removes it. The string is thread-local, valid until the next
 * call on the same thread. */
DST_API dst_status_t dst_io_probe_json(const char *dir, int64_t file_bytes, const char **out_json);

/* Bandwidth of the job's collectives, as nccl-tests measures and reports it:
 * call it on every rank of a launch (like dst_engine_create, it joins the job
 * the environment describes). `config_json` (NULL or "": one data-parallel
 * group of all ranks) gives the layout and the timeout; `request_json` (NULL:
 * defaults) is {"group": "dp"|"tp"|"pp", "ops": "allreduce,allgather,
 * reduce_scatter,broadcast,reduce,sendrecv" or "all" (or a list), "min_bytes"
 * (4096), "max_bytes" (64 MiB), "factor" (4), "iters" (0: 50 up to 1 MiB, 10
 * above), "warmup" (2)}. Returns {group, ranks, backend, rows: [{op, bytes,
 * iters, time_us, algbw_GBps, busbw_GBps, errors}]}: bytes as nccl-tests
 * counts them, time the mean of `iters` on the slowest rank, busbw = algbw x
 * 2(n-1)/n (allreduce), x (n-1)/n (allgather, reduce_scatter), x 1 (others;
 * sendrecv sends to the next rank and receives from the previous one), errors
 * the wrong elements of one checked run before the timing, over all ranks.
 * The same on every rank. A group of one rank is DST_ERR_INVALID_ARGUMENT.
 * The string is thread-local, valid until the next call on the same thread. */
DST_API dst_status_t dst_comm_bench_json(const char *config_json, const char *request_json,
                                         const char **out_json);

/* ------------------------------------------------------------------------- */
/* Token datasets                                                             */
/* ------------------------------------------------------------------------- */

typedef struct dst_dataset dst_dataset_t;

typedef enum dst_split { DST_SPLIT_TRAIN = 0, DST_SPLIT_VAL = 1 } dst_split_t;

/* Opens a text file as a byte-level token stream (vocab 256). The last
 * `val_fraction` of the bytes is the validation split. `path` NULL opens the
 * default corpus: the files without a '.' in /usr/share/games/fortunes
 * (Debian's `fortunes` package), or in $DSTRAIN_DEFAULT_CORPUS_DIR,
 * concatenated by name; DST_ERR_IO if absent. dst_dataset_path then returns
 * that directory. */
DST_API dst_status_t dst_dataset_open_text(dst_dataset_t **out, const char *path,
                                           double val_fraction, uint64_t seed);
/* Opens a file of token ids (a tokenizer's output, e.g. dstrain tokenize's):
 * llm.c's .bin (a header of 256 int32: magic 20240520, version, the token
 * count; then the tokens: uint16 in version 1, uint32 in version 2) or
 * nanoGPT's raw train.bin/val.bin (uint16 tokens only).
 * The last `val_fraction` of the tokens is the validation split. DST_ERR_IO
 * names a truncated file, an odd size or another llm.c version. */
DST_API dst_status_t dst_dataset_open_tokens(dst_dataset_t **out, const char *path,
                                             double val_fraction, uint64_t seed);
/* The largest token id in the data (check it against the model's vocabulary). */
DST_API dst_status_t dst_dataset_max_token(const dst_dataset_t *dataset, int64_t *out_max);
DST_API void dst_dataset_destroy(dst_dataset_t *dataset);

/* Tokens in a split. */
DST_API dst_status_t dst_dataset_num_tokens(const dst_dataset_t *dataset, dst_split_t split,
                                            size_t *out_tokens);

/* The path the dataset was read from (owned by the dataset). */
DST_API dst_status_t dst_dataset_path(const dst_dataset_t *dataset, const char **out_path);

/* Fills tokens/targets [n_samples, seq_len] (count = n_samples * seq_len
 * elements each) with random windows of the split; targets are the tokens
 * shifted by one. Sample j's window depends only on (seed, split, batch_index,
 * first_sample + j), so the data position is just batch_index, and a
 * data-parallel rank r that asks for first_sample = r * n_samples gets its
 * slice of exactly the batch a single rank would see.
 * DST_ERR_INVALID_ARGUMENT when a split is shorter than seq_len + 1 or a size is 0. */
DST_API dst_status_t dst_dataset_batch(const dst_dataset_t *dataset, dst_split_t split,
                                       uint64_t batch_index, uint64_t first_sample,
                                       size_t n_samples, size_t seq_len, int32_t *tokens,
                                       int32_t *targets, size_t count);

/* tokens[0, count) = the split's tokens [offset, offset + count), in order
 * (an evaluation's windows over a whole file; the train split then the
 * validation split are the file from its start). DST_ERR_INVALID_ARGUMENT
 * when the range passes the split's end. */
DST_API dst_status_t dst_dataset_read(const dst_dataset_t *dataset, dst_split_t split,
                                      size_t offset, int32_t *tokens, size_t count);

/* ------------------------------------------------------------------------- */
/* Generation                                                                 */
/* ------------------------------------------------------------------------- */

/* A trained language model opened for inference: a single-rank copy in host
 * memory, whatever layout trained it (a checkpoint's consolidated weights),
 * or a Hugging Face model directory's weights; each new token runs one
 * position forward over a key/value cache. Not thread-safe: one call at a
 * time per generator. No multi-process job is joined. */
typedef struct dst_generator dst_generator_t;

typedef struct dst_generator_options {
  size_t struct_size;         /* set by dst_generator_options_default */
  const char *checkpoint_dir; /* a dstrain checkpoint directory (any training layout), or */
  const char *checkpoint_tag; /*   NULL: its latest tag */
  const char *model_json;     /* a model spec as JSON (its seeded initial weights), or */
  const char *model_path;     /* a path: a Hugging Face model directory (config.json and its
                                 safetensors weights) or a model spec file; exactly one of
                                 checkpoint_dir, model_json, model_path */
  int64_t context;            /* positions a sequence may fill, prompt included; 0: the model's */
  int64_t batch;              /* sequences one logits / loss call may carry; 0: 1 */
  int32_t num_threads;        /* 0: DSTRAIN_NUM_THREADS, OMP_NUM_THREADS, else the cores */
  const char *precision;      /* NULL or "fp32"; "bf16": bf16 weights and GEMMs */
} dst_generator_options_t;

#define DST_GENERATOR_OPTIONS_V1_SIZE \
  (offsetof(dst_generator_options_t, precision) + sizeof(const char *))
DST_API void dst_generator_options_default(dst_generator_options_t *options);
#define DST_GENERATOR_OPTIONS_INIT \
  { sizeof(dst_generator_options_t), NULL, NULL, NULL, NULL, 0, 0, 0, NULL }

/* Opens the model and reads its weights (a checkpoint's are verified against
 * their checksums; a Hugging Face directory's matched by name and shape, as
 * for training). On failure *out is NULL. */
DST_API dst_status_t dst_generator_create(dst_generator_t **out,
                                          const dst_generator_options_t *options);
/* NULL is a no-op. */
DST_API void dst_generator_destroy(dst_generator_t *generator);

/* {"model_type", "vocab_size", "context", "batch", "eos_token_ids": [...],
 * "precision", "model_spec": {...}}. Owned by the generator, valid until it
 * is destroyed. */
DST_API dst_status_t dst_generator_info_json(const dst_generator_t *generator,
                                             const char **out_json);

/* logits [n_seqs, seq_len, vocab_size] (logits_count elements) of every
 * position of n_seqs sequences of seq_len tokens, forward from position 0:
 * the model's own logits, no sampling. n_seqs <= batch, seq_len <= context. */
DST_API dst_status_t dst_generator_logits(dst_generator_t *generator, const int32_t *tokens,
                                          size_t n_seqs, size_t seq_len, float *logits,
                                          size_t logits_count);

/* The mean next-token cross-entropy of n_seqs sequences of seq_len tokens
 * against targets [n_seqs, seq_len] (-1: ignored), and (out_counted, may be
 * NULL) the number of targets counted: an evaluation's loss; perplexity is
 * exp(loss). */
DST_API dst_status_t dst_generator_loss(dst_generator_t *generator, const int32_t *tokens,
                                        const int32_t *targets, size_t n_seqs, size_t seq_len,
                                        double *out_loss, int64_t *out_counted);

/* How the next token is chosen, as Hugging Face's generate() with do_sample:
 * logits / temperature, the top_k largest kept, then the smallest set of the
 * most probable reaching top_p; temperature 0 is greedy (the argmax). The
 * draw of the n-th new token is a function of (seed, n) alone. */
typedef struct dst_sampling {
  size_t struct_size;     /* set by dst_sampling_default */
  int64_t max_new_tokens; /* default 64 */
  double temperature;     /* default 1; 0: greedy */
  int64_t top_k;          /* default 0: off */
  double top_p;           /* default 1: off */
  uint64_t seed;          /* default 0 */
  int32_t use_cache;      /* default 1; 0: the whole sequence forward again for every token */
  int32_t stop_at_eos;    /* default 1: stop after one of the model's eos_token_ids */
} dst_sampling_t;

#define DST_SAMPLING_V1_SIZE (offsetof(dst_sampling_t, stop_at_eos) + sizeof(int32_t))
DST_API void dst_sampling_default(dst_sampling_t *sampling);
#define DST_SAMPLING_INIT \
  { sizeof(dst_sampling_t), 64, 1.0, 0, 1.0, 0, 1, 1 }

/* Called with each new token as it is chosen; nonzero stops the generation. */
typedef int (*dst_token_callback_t)(void *user_data, int32_t token);

/* Continues the prompt (prompt_len >= 1 tokens, fewer than the context) with
 * up to sampling->max_new_tokens tokens: each is passed to on_token (may be
 * NULL) as it comes and stored in out_tokens (may be NULL; else out_capacity
 * must be at least max_new_tokens); *out_count (may be NULL) receives how
 * many. *out_stop_reason (may be NULL; static) says why it stopped:
 * "length" (max_new_tokens), "eos", "context" (prompt + new tokens fill the
 * context) or "caller" (on_token returned nonzero). sampling NULL: the
 * defaults. */
DST_API dst_status_t dst_generator_generate(dst_generator_t *generator, const int32_t *prompt,
                                            size_t prompt_len, const dst_sampling_t *sampling,
                                            dst_token_callback_t on_token, void *user_data,
                                            int32_t *out_tokens, size_t out_capacity,
                                            size_t *out_count, const char **out_stop_reason);

/* ------------------------------------------------------------------------- */
/* Tokenizers                                                                 */
/* ------------------------------------------------------------------------- */

/* A tokenizer read from a file: a SentencePiece `tokenizer.model` (LLaMA 1/2,
 * Mistral; through libsentencepiece), a Hugging Face `tokenizer.json` with a
 * byte-level BPE model (GPT-2, LLaMA 3, BLOOM), GPT-2's `vocab.json` (beside
 * its `merges.txt`), or a directory holding one of them. Text is UTF-8
 * (invalid sequences read as U+FFFD). Calls on one tokenizer may run from
 * several threads at once. */
typedef struct dst_tokenizer dst_tokenizer_t;

/* Components not built (another model, pre-tokenizer, normalizer, decoder)
 * are DST_ERR_NOT_SUPPORTED naming them. On failure *out is NULL. */
DST_API dst_status_t dst_tokenizer_open(dst_tokenizer_t **out, const char *path);
/* NULL is a no-op. */
DST_API void dst_tokenizer_destroy(dst_tokenizer_t *tokenizer);
/* {"kind": "sentencepiece" | "bpe", "vocab_size", "bos_id", "eos_id"} (-1:
 * none). Owned by the tokenizer. */
DST_API dst_status_t dst_tokenizer_info_json(const dst_tokenizer_t *tokenizer,
                                             const char **out_json);
/* The ids of text[0, length). add_special: the tokenizer's additions (a
 * SentencePiece BOS; a tokenizer.json's post-processor template), as
 * transformers' encode() adds them by default. *out_ids is thread-local,
 * valid until the next encode on the same thread. */
DST_API dst_status_t dst_tokenizer_encode(const dst_tokenizer_t *tokenizer, const char *text,
                                          size_t length, int add_special,
                                          const int32_t **out_ids, size_t *out_count);
/* The UTF-8 text of ids[0, n) (*out_text NUL-terminated, *out_length bytes,
 * may be NULL; thread-local, valid until the next decode on the same thread). */
DST_API dst_status_t dst_tokenizer_decode(const dst_tokenizer_t *tokenizer, const int32_t *ids,
                                          size_t n, const char **out_text, size_t *out_length);

typedef struct dst_tokenize_options {
  size_t struct_size;        /* set by dst_tokenize_options_default */
  int32_t num_threads;       /* 0: the cores */
  double val_fraction;       /* with val_out_path: each file's tail share (default 0.05) */
  int32_t eos_after_files;   /* default 1: the tokenizer's eos id after each file's part */
  int32_t add_special;       /* default 0: each part encoded with the tokenizer's additions */
  int64_t chunk_bytes;       /* default 16 KiB: the target size of a chunk */
} dst_tokenize_options_t;

#define DST_TOKENIZE_OPTIONS_V1_SIZE (offsetof(dst_tokenize_options_t, chunk_bytes) + sizeof(int64_t))
DST_API void dst_tokenize_options_default(dst_tokenize_options_t *options);

/* Called from the calling thread as the files are read: bytes done, bytes in all. */
typedef void (*dst_progress_callback_t)(void *user_data, int64_t done, int64_t total);

/* Tokenizes files[0, n_files) into llm.c's token-file format at out_path (a
 * header of 256 int32: magic 20240520, version, token count; then uint16 ids,
 * version 1, or uint32 where the vocabulary exceeds 65536, version 2), each
 * file's last val_fraction into val_out_path when it is not NULL; on several
 * threads, streaming (a few chunks in memory), the ids equal to each file's
 * whole encoding. Files appear complete or not at all. *out_json (may be
 * NULL; thread-local): {"bytes", "train_tokens", "val_tokens", "version",
 * "seconds"}. `dstrain --data` reads both versions. */
DST_API dst_status_t dst_tokenize_files(const dst_tokenizer_t *tokenizer, const char *const *files,
                                        size_t n_files, const char *out_path,
                                        const char *val_out_path,
                                        const dst_tokenize_options_t *options,
                                        dst_progress_callback_t progress, void *user_data,
                                        const char **out_json);

#ifdef __cplusplus
}
#endif

#endif /* DSTRAIN_DSTRAIN_H */
