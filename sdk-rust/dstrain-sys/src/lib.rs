//! Raw FFI declarations for `libdstrain`, mirroring `dstrain/dstrain.h` one to one.
//!
//! Everything here is `unsafe` to call and follows the C header's rules exactly; the
//! [`dstrain`](../dstrain/index.html) crate is the safe interface. Names, types and constants
//! are the header's, so the header's documentation applies unchanged. A test
//! (`tests/layout.rs`) compiles a C program against the header and checks every struct size,
//! field offset, enum size and signedness, constant and exported function name against these
//! declarations.
//!
//! # Linking
//!
//! The build script links `libdstrain.so` from `$DSTRAIN_LIB_DIR` (default: `../../build`
//! relative to this crate, i.e. the CMake build directory of the dstrain repository) and sets
//! an rpath to that directory for this crate's own tests. Dependent crates receive the
//! directory as `DEP_DSTRAIN_LIB_DIR` in their build scripts (the `dstrain` crate uses it to
//! set the rpath of its tests and examples).
//!
//! # Enums
//!
//! The header's C enums (`dst_status_t`, `dst_model_type_t`, `dst_loss_type_t`,
//! `dst_split_t`) are declared as integer type aliases with one constant per enumerator, not
//! as Rust enums: the library may return a value this crate does not know yet, and a Rust enum
//! holding an undeclared discriminant is undefined behaviour. GCC and Clang give these enums
//! the type `unsigned int` (no negative enumerators), hence `c_uint`; the layout test checks
//! the size and signedness.
//!
//! # Thread safety
//!
//! As the header says: functions that take no handle are safe from any thread; calls on one
//! `dst_engine_t` or `dst_dataset_t` must not run concurrently. `dst_last_error()` is
//! thread-local, so read it on the thread that made the failing call, right after it.
#![allow(non_camel_case_types)]
#![warn(missing_docs)]

use std::os::raw::{c_char, c_double, c_int, c_uint};

/// Major version of the header these declarations mirror (`DST_VERSION_MAJOR`).
pub const DST_VERSION_MAJOR: c_int = 0;
/// Minor version of the header these declarations mirror (`DST_VERSION_MINOR`).
pub const DST_VERSION_MINOR: c_int = 2;
/// Patch version of the header these declarations mirror (`DST_VERSION_PATCH`).
pub const DST_VERSION_PATCH: c_int = 0;
/// `DST_VERSION_MAJOR * 10000 + DST_VERSION_MINOR * 100 + DST_VERSION_PATCH`.
pub const DST_VERSION_NUMBER: c_int =
    DST_VERSION_MAJOR * 10000 + DST_VERSION_MINOR * 100 + DST_VERSION_PATCH;
/// The header's version string (`DST_VERSION_STRING`), without the NUL terminator.
pub const DST_VERSION_STRING: &str = "0.2.0";
/// `DST_STRUCT_SIZE_MAX`: the largest `struct_size` a versioned struct may have. The library
/// accepts any `struct_size` from the struct's `DST_*_V1_SIZE` up to this (see the header).
pub const DST_STRUCT_SIZE_MAX: usize = 65536;

// ---------------------------------------------------------------------------
// Status codes
// ---------------------------------------------------------------------------

/// `dst_status_t`: every call's result; [`DST_OK`] is 0.
pub type dst_status_t = c_uint;
/// Success.
pub const DST_OK: dst_status_t = 0;
/// NULL handle or buffer, wrong size, bad value.
pub const DST_ERR_INVALID_ARGUMENT: dst_status_t = 1;
/// ds_config or model spec is malformed or inconsistent.
pub const DST_ERR_CONFIG: dst_status_t = 2;
/// Recognised but not built yet.
pub const DST_ERR_NOT_SUPPORTED: dst_status_t = 3;
/// A file could not be read or written.
pub const DST_ERR_IO: dst_status_t = 4;
/// Checkpoint missing, corrupt or not matching the model.
pub const DST_ERR_CHECKPOINT: dst_status_t = 5;
/// Call in the wrong order.
pub const DST_ERR_STATE: dst_status_t = 6;
/// An allocation failed.
pub const DST_ERR_OUT_OF_MEMORY: dst_status_t = 7;
/// A collective failed or timed out.
pub const DST_ERR_COMM: dst_status_t = 8;
/// Non-finite loss or gradients.
pub const DST_ERR_NUMERIC: dst_status_t = 9;
/// A bug in dstrain.
pub const DST_ERR_INTERNAL: dst_status_t = 10;
/// `dst_engine_abort` was called while the call ran.
pub const DST_ERR_ABORTED: dst_status_t = 11;

// ---------------------------------------------------------------------------
// Engine
// ---------------------------------------------------------------------------

/// Opaque engine handle (`struct dst_engine`); only ever used behind a pointer.
#[repr(C)]
pub struct dst_engine {
    _opaque: [u8; 0],
    // Not Send, not Sync, not Unpin: the safe crate decides what is allowed.
    _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}
/// `dst_engine_t`.
pub type dst_engine_t = dst_engine;

/// `dst_engine_options_t`: how to create an engine. Fill with
/// [`dst_engine_options_default`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dst_engine_options {
    /// `sizeof(dst_engine_options_t)`, set by `dst_engine_options_default`.
    pub struct_size: usize,
    /// ds_config as a JSON string, or NULL.
    pub config_json: *const c_char,
    /// ... or a path to ds_config.json (exactly one of the two).
    pub config_path: *const c_char,
    /// Model spec as a JSON string, or NULL.
    pub model_json: *const c_char,
    /// ... or a path to it (exactly one of the two).
    pub model_path: *const c_char,
    /// Resolves `"auto"` in `scheduler.params.total_num_steps`; 0 = unknown.
    pub total_steps: i64,
}
/// `dst_engine_options_t`.
pub type dst_engine_options_t = dst_engine_options;
/// `DST_ENGINE_OPTIONS_V1_SIZE`: the size of the first version of `dst_engine_options_t`.
pub const DST_ENGINE_OPTIONS_V1_SIZE: usize = 48;

/// `dst_model_type_t`.
pub type dst_model_type_t = c_uint;
/// GPT-2-style language model.
pub const DST_MODEL_GPT: dst_model_type_t = 1;
/// Sequential stack of layers.
pub const DST_MODEL_SEQUENTIAL: dst_model_type_t = 2;

/// `dst_loss_type_t`.
pub type dst_loss_type_t = c_uint;
/// Cross-entropy over classes / tokens.
pub const DST_LOSS_CROSS_ENTROPY: dst_loss_type_t = 1;
/// Mean squared error.
pub const DST_LOSS_MSE: dst_loss_type_t = 2;

/// `dst_engine_info_t`: what a caller needs to shape its batches.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dst_engine_info {
    /// `sizeof(dst_engine_info_t)`; set before calling `dst_engine_get_info`.
    pub struct_size: usize,
    /// One of the `DST_MODEL_*` constants.
    pub model_type: dst_model_type_t,
    /// One of the `DST_LOSS_*` constants.
    pub loss_type: dst_loss_type_t,
    /// Trainable scalars (tied weights counted once).
    pub num_parameters: i64,
    /// Global samples per optimizer step.
    pub train_batch_size: i64,
    /// Samples per micro-step per rank.
    pub micro_batch_size: i64,
    /// Micro-steps per optimizer step.
    pub grad_accum_steps: i64,
    /// Data-parallel ranks.
    pub dp_size: i64,
    /// This process's global rank.
    pub rank: i64,
    /// Processes in the job.
    pub world_size: i64,
    /// GPT: maximum context (n_ctx); sequential: 0.
    pub seq_len: i64,
    /// GPT: vocabulary; sequential: 0.
    pub vocab_size: i64,
    /// Sequential: features per sample; GPT: 0.
    pub input_dim: i64,
    /// Sequential: outputs (classes) per sample; GPT: vocab.
    pub output_dim: i64,
    /// Version 2: this rank's data-parallel index.
    pub dp_rank: i64,
    /// Pipeline stages.
    pub pp_size: i64,
    /// This rank's pipeline stage.
    pub pp_rank: i64,
    /// Tensor-parallel ranks.
    pub tp_size: i64,
    /// This rank's tensor-parallel index.
    pub tp_rank: i64,
}
/// `dst_engine_info_t`.
pub type dst_engine_info_t = dst_engine_info;
/// `DST_ENGINE_INFO_V1_SIZE`: the size of the first version of `dst_engine_info_t`.
pub const DST_ENGINE_INFO_V1_SIZE: usize = 104;

/// `dst_batch_t`: one call's samples; see the header for the buffer shapes. Fill with
/// [`dst_batch_default`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dst_batch {
    /// `sizeof(dst_batch_t)`, set by `dst_batch_default`.
    pub struct_size: usize,
    /// Samples in the batch.
    pub n_samples: usize,
    /// GPT: tokens per sample, 1..n_ctx; sequential: 0.
    pub seq_len: usize,
    /// GPT: `[n_samples, seq_len]` token ids.
    pub tokens: *const i32,
    /// Element count of `tokens`.
    pub tokens_count: usize,
    /// GPT: `[n_samples, seq_len]` next-token ids (-1 ignored); sequential cross-entropy:
    /// `[n_samples]` class ids.
    pub targets: *const i32,
    /// Element count of `targets`.
    pub targets_count: usize,
    /// Sequential: `[n_samples, input_dim]` features.
    pub inputs: *const f32,
    /// Element count of `inputs`.
    pub inputs_count: usize,
    /// Sequential MSE: `[n_samples, output_dim]` regression targets.
    pub labels: *const f32,
    /// Element count of `labels`.
    pub labels_count: usize,
}
/// `dst_batch_t`.
pub type dst_batch_t = dst_batch;
/// `DST_BATCH_V1_SIZE`: the size of the first version of `dst_batch_t`.
pub const DST_BATCH_V1_SIZE: usize = 88;

// ---------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------

/// `DST_MAX_DIMS`: the most dimensions a parameter tensor has.
pub const DST_MAX_DIMS: usize = 4;

/// `dst_tensor_info_t`: one named parameter tensor.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dst_tensor_info {
    /// `sizeof(dst_tensor_info_t)`; set before calling `dst_engine_param_info`.
    pub struct_size: usize,
    /// PyTorch-style name, owned by the engine.
    pub name: *const c_char,
    /// Number of dimensions used in `shape`.
    pub ndim: i32,
    /// Extent of each dimension (first `ndim` entries).
    pub shape: [i64; DST_MAX_DIMS],
    /// Element count.
    pub numel: i64,
}
/// `dst_tensor_info_t`.
pub type dst_tensor_info_t = dst_tensor_info;
/// `DST_TENSOR_INFO_V1_SIZE`: the size of the first version of `dst_tensor_info_t`.
pub const DST_TENSOR_INFO_V1_SIZE: usize = 64;

// ---------------------------------------------------------------------------
// Token datasets
// ---------------------------------------------------------------------------

/// Opaque dataset handle (`struct dst_dataset`); only ever used behind a pointer.
#[repr(C)]
pub struct dst_dataset {
    _opaque: [u8; 0],
    _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}
/// `dst_dataset_t`.
pub type dst_dataset_t = dst_dataset;

/// `dst_split_t`.
pub type dst_split_t = c_uint;
/// The training split (the first `1 - val_fraction` of the bytes).
pub const DST_SPLIT_TRAIN: dst_split_t = 0;
/// The validation split (the last `val_fraction` of the bytes).
pub const DST_SPLIT_VAL: dst_split_t = 1;

// ---------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------

/// Opaque generator handle (`struct dst_generator`); only ever used behind a pointer.
#[repr(C)]
pub struct dst_generator {
    _opaque: [u8; 0],
    _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}
/// `dst_generator_t`.
pub type dst_generator_t = dst_generator;

/// `dst_generator_options_t`: what to open for generation. Fill with
/// [`dst_generator_options_default`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dst_generator_options {
    /// `sizeof(dst_generator_options_t)`, set by `dst_generator_options_default`.
    pub struct_size: usize,
    /// A dstrain checkpoint directory (any training layout), or NULL.
    pub checkpoint_dir: *const c_char,
    /// Its tag; NULL: its latest.
    pub checkpoint_tag: *const c_char,
    /// A model spec as JSON (its seeded initial weights), or NULL.
    pub model_json: *const c_char,
    /// A Hugging Face model directory or a model spec file, or NULL.
    pub model_path: *const c_char,
    /// Positions a sequence may fill, prompt included; 0: the model's.
    pub context: i64,
    /// Sequences one logits / loss call may carry; 0: 1.
    pub batch: i64,
    /// CPU threads; 0: the default.
    pub num_threads: i32,
    /// NULL or "fp32"; "bf16".
    pub precision: *const c_char,
}
/// `dst_generator_options_t`.
pub type dst_generator_options_t = dst_generator_options;
/// `DST_GENERATOR_OPTIONS_V1_SIZE`.
pub const DST_GENERATOR_OPTIONS_V1_SIZE: usize = 72;

/// `dst_sampling_t`: how the next token is chosen. Fill with [`dst_sampling_default`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dst_sampling {
    /// `sizeof(dst_sampling_t)`, set by `dst_sampling_default`.
    pub struct_size: usize,
    /// Default 64.
    pub max_new_tokens: i64,
    /// Default 1; 0: greedy.
    pub temperature: c_double,
    /// Default 0: off.
    pub top_k: i64,
    /// Default 1: off.
    pub top_p: c_double,
    /// Default 0.
    pub seed: u64,
    /// Default 1; 0: the whole sequence forward again for every token.
    pub use_cache: i32,
    /// Default 1: stop after one of the model's eos_token_ids.
    pub stop_at_eos: i32,
}
/// `dst_sampling_t`.
pub type dst_sampling_t = dst_sampling;
/// `DST_SAMPLING_V1_SIZE`.
pub const DST_SAMPLING_V1_SIZE: usize = 56;

/// `dst_token_callback_t`: called with each new token; nonzero stops the generation.
pub type dst_token_callback_t =
    Option<unsafe extern "C" fn(user_data: *mut std::os::raw::c_void, token: i32) -> c_int>;

// ---------------------------------------------------------------------------
// Tokenizers
// ---------------------------------------------------------------------------

/// Opaque tokenizer handle (`struct dst_tokenizer`); only ever used behind a pointer.
#[repr(C)]
pub struct dst_tokenizer {
    _opaque: [u8; 0],
    _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}
/// `dst_tokenizer_t`.
pub type dst_tokenizer_t = dst_tokenizer;

/// `dst_tokenize_options_t`: how `dst_tokenize_files` runs. Fill with
/// [`dst_tokenize_options_default`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dst_tokenize_options {
    /// `sizeof(dst_tokenize_options_t)`, set by `dst_tokenize_options_default`.
    pub struct_size: usize,
    /// Tokenizing threads; 0: the cores.
    pub num_threads: i32,
    /// Each file's tail share for the validation file (default 0.05).
    pub val_fraction: c_double,
    /// Default 1: the eos id after each file's part.
    pub eos_after_files: i32,
    /// Default 0: each part encoded with the tokenizer's additions.
    pub add_special: i32,
    /// Default 16 KiB: the target size of a chunk.
    pub chunk_bytes: i64,
}
/// `dst_tokenize_options_t`.
pub type dst_tokenize_options_t = dst_tokenize_options;
/// `DST_TOKENIZE_OPTIONS_V1_SIZE`.
pub const DST_TOKENIZE_OPTIONS_V1_SIZE: usize = 40;

/// `dst_progress_callback_t`: bytes done, bytes in all.
pub type dst_progress_callback_t =
    Option<unsafe extern "C" fn(user_data: *mut std::os::raw::c_void, done: i64, total: i64)>;

extern "C" {
    /// Static, never NULL: "ok", "invalid argument", ...
    pub fn dst_status_string(status: dst_status_t) -> *const c_char;
    /// The message of the last failed call on this thread ("" if none).
    pub fn dst_last_error() -> *const c_char;
    /// Run-time version string of the loaded library.
    pub fn dst_version() -> *const c_char;
    /// Run-time `DST_VERSION_NUMBER` of the loaded library.
    pub fn dst_version_number() -> c_int;
    /// A JSON object describing the build (static storage).
    pub fn dst_build_info_json(out_json: *mut *const c_char) -> dst_status_t;

    /// Fills `*options` with defaults and the struct size.
    pub fn dst_engine_options_default(options: *mut dst_engine_options_t);
    /// Creates an engine; `*out` is NULL on failure.
    pub fn dst_engine_create(
        out: *mut *mut dst_engine_t,
        options: *const dst_engine_options_t,
    ) -> dst_status_t;
    /// Frees everything the engine owns. NULL is a no-op.
    pub fn dst_engine_destroy(engine: *mut dst_engine_t);
    /// Frees the engine without waiting for the other ranks (like `ncclCommAbort`); the
    /// handle must not be used afterwards. NULL is a no-op.
    pub fn dst_engine_abort(engine: *mut dst_engine_t);
    /// Fills `*info` (set `info.struct_size` first).
    pub fn dst_engine_get_info(
        engine: *const dst_engine_t,
        info: *mut dst_engine_info_t,
    ) -> dst_status_t;
    /// Zeroes `*batch` and sets its struct size.
    pub fn dst_batch_default(batch: *mut dst_batch_t);
    /// One optimizer step; `out_loss` (may be NULL) receives the mean loss.
    pub fn dst_engine_train_batch(
        engine: *mut dst_engine_t,
        batch: *const dst_batch_t,
        out_loss: *mut f32,
    ) -> dst_status_t;
    /// Forward only, no state change.
    pub fn dst_engine_eval_batch(
        engine: *mut dst_engine_t,
        batch: *const dst_batch_t,
        out_loss: *mut f32,
    ) -> dst_status_t;
    /// Forward and backward without an optimizer step.
    pub fn dst_engine_forward_backward(
        engine: *mut dst_engine_t,
        batch: *const dst_batch_t,
        out_loss: *mut f32,
    ) -> dst_status_t;
    /// Optimizer steps taken so far.
    pub fn dst_engine_step_count(engine: *const dst_engine_t, out_steps: *mut i64) -> dst_status_t;
    /// The learning rate the next optimizer step will use.
    pub fn dst_engine_learning_rate(
        engine: *const dst_engine_t,
        out_lr: *mut c_double,
    ) -> dst_status_t;
    /// fp16: the loss scale and the steps skipped on overflow (either pointer may be null).
    pub fn dst_engine_loss_scale(
        engine: *const dst_engine_t,
        out_scale: *mut c_double,
        out_skipped_steps: *mut i64,
    ) -> dst_status_t;

    /// Number of named parameter tensors.
    pub fn dst_engine_param_count(
        engine: *const dst_engine_t,
        out_count: *mut usize,
    ) -> dst_status_t;
    /// Describes parameter tensor `index`.
    pub fn dst_engine_param_info(
        engine: *const dst_engine_t,
        index: usize,
        info: *mut dst_tensor_info_t,
    ) -> dst_status_t;
    /// Copies a parameter out of the engine; `count` must equal its numel.
    pub fn dst_engine_get_param(
        engine: *const dst_engine_t,
        name: *const c_char,
        data: *mut f32,
        count: usize,
    ) -> dst_status_t;
    /// Copies a parameter into the engine; `count` must equal its numel.
    pub fn dst_engine_set_param(
        engine: *mut dst_engine_t,
        name: *const c_char,
        data: *const f32,
        count: usize,
    ) -> dst_status_t;
    /// Copies a parameter's gradient out of the engine; `count` must equal its numel.
    pub fn dst_engine_get_grad(
        engine: *const dst_engine_t,
        name: *const c_char,
        data: *mut f32,
        count: usize,
    ) -> dst_status_t;

    /// Writes `DIR/TAG/` and `DIR/latest` atomically.
    pub fn dst_engine_save_checkpoint(
        engine: *mut dst_engine_t,
        dir: *const c_char,
        tag: *const c_char,
        client_state_json: *const c_char,
    ) -> dst_status_t;
    /// Restores from `DIR/TAG` (tag NULL: `DIR/latest`).
    pub fn dst_engine_load_checkpoint(
        engine: *mut dst_engine_t,
        dir: *const c_char,
        tag: *const c_char,
        out_client_state: *mut *const c_char,
    ) -> dst_status_t;
    /// Only a checkpoint's weights: no optimizer state, step or model-spec check.
    pub fn dst_engine_load_weights(
        engine: *mut dst_engine_t,
        dir: *const c_char,
        tag: *const c_char,
    ) -> dst_status_t;

    /// A JSON metrics snapshot, valid until the next call on the engine.
    pub fn dst_engine_metrics_json(
        engine: *mut dst_engine_t,
        out_json: *mut *const c_char,
    ) -> dst_status_t;
    /// Memory per category, the process's resident set and the machine's, as
    /// JSON; valid until the next call on the engine.
    pub fn dst_engine_memory_status(
        engine: *mut dst_engine_t,
        out_json: *mut *const c_char,
    ) -> dst_status_t;
    /// The resolved configuration as JSON, valid for the life of the engine.
    pub fn dst_engine_config_json(
        engine: *const dst_engine_t,
        out_json: *mut *const c_char,
    ) -> dst_status_t;
    /// A JSON description of a checkpoint on disk (tag NULL: DIR/latest), every
    /// file verified; thread-local, valid until the next call on the thread.
    pub fn dst_checkpoint_inspect_json(
        dir: *const c_char,
        tag: *const c_char,
        out_json: *mut *const c_char,
    ) -> dst_status_t;
    /// Writes a checkpoint's consolidated fp32 weights to one safetensors file.
    pub fn dst_checkpoint_export_weights(
        dir: *const c_char,
        tag: *const c_char,
        out_path: *const c_char,
    ) -> dst_status_t;
    /// Writes a checkpoint as a Hugging Face model directory (config.json,
    /// the family's names and layouts; dtype "fp32"/"bf16"/"fp16", shards of
    /// at most max_shard_size such as "5GB"; NULL for the defaults).
    pub fn dst_checkpoint_export_hf(
        dir: *const c_char,
        tag: *const c_char,
        out_dir: *const c_char,
        dtype: *const c_char,
        max_shard_size: *const c_char,
    ) -> dst_status_t;
    /// The metrics server's address ("http://127.0.0.1:9400/"), or "" when
    /// dstrain.monitor.http is off. Valid for the life of the engine.
    pub fn dst_engine_monitor_url(
        engine: *const dst_engine_t,
        out_url: *mut *const c_char,
    ) -> dst_status_t;
    /// Per-rank model-state memory for each ZeRO stage at `world_size` ranks, as JSON
    /// (thread-local, valid until the next call on the same thread). Allocates nothing.
    pub fn dst_estimate_memory_json(
        options: *const dst_engine_options_t,
        world_size: i64,
        out_json: *mut *const c_char,
    ) -> dst_status_t;
    /// Reads a config or model-spec file as the engine does (a regular file up to
    /// 16 MiB). The text is thread-local, valid until the next call on the same thread.
    pub fn dst_config_file_read(path: *const c_char, out_text: *mut *const c_char) -> dst_status_t;
    /// Sequential write/read bandwidth of the file system under `dir` through the NVMe
    /// offload tier's I/O path, as JSON (thread-local, valid until the next call on the
    /// same thread); `file_bytes` 0: 128 MiB.
    pub fn dst_io_probe_json(
        dir: *const c_char,
        file_bytes: i64,
        out_json: *mut *const c_char,
    ) -> dst_status_t;

    /// The job's collectives measured by nccl-tests' definitions, as JSON (thread-local,
    /// valid until the next call on the same thread); call on every rank of a launch.
    pub fn dst_comm_bench_json(
        config_json: *const c_char,
        request_json: *const c_char,
        out_json: *mut *const c_char,
    ) -> dst_status_t;

    /// Opens a text file (NULL: the default corpus) as byte-level tokens.
    pub fn dst_dataset_open_text(
        out: *mut *mut dst_dataset_t,
        path: *const c_char,
        val_fraction: c_double,
        seed: u64,
    ) -> dst_status_t;
    /// Opens a file of uint16 token ids (llm.c's .bin or nanoGPT's raw .bin).
    pub fn dst_dataset_open_tokens(
        out: *mut *mut dst_dataset_t,
        path: *const c_char,
        val_fraction: c_double,
        seed: u64,
    ) -> dst_status_t;
    /// The largest token id in the data.
    pub fn dst_dataset_max_token(dataset: *const dst_dataset_t, out_max: *mut i64) -> dst_status_t;
    /// Frees the dataset. NULL is a no-op.
    pub fn dst_dataset_destroy(dataset: *mut dst_dataset_t);
    /// Tokens in a split.
    pub fn dst_dataset_num_tokens(
        dataset: *const dst_dataset_t,
        split: dst_split_t,
        out_tokens: *mut usize,
    ) -> dst_status_t;
    /// The path the dataset was read from (owned by the dataset).
    pub fn dst_dataset_path(
        dataset: *const dst_dataset_t,
        out_path: *mut *const c_char,
    ) -> dst_status_t;
    /// Fills `tokens`/`targets` (`count = n_samples * seq_len` each) with windows of a split.
    pub fn dst_dataset_batch(
        dataset: *const dst_dataset_t,
        split: dst_split_t,
        batch_index: u64,
        first_sample: u64,
        n_samples: usize,
        seq_len: usize,
        tokens: *mut i32,
        targets: *mut i32,
        count: usize,
    ) -> dst_status_t;
    /// The split's tokens `[offset, offset + count)` in order.
    pub fn dst_dataset_read(
        dataset: *const dst_dataset_t,
        split: dst_split_t,
        offset: usize,
        tokens: *mut i32,
        count: usize,
    ) -> dst_status_t;

    /// Fills `*options` with defaults and its struct size.
    pub fn dst_generator_options_default(options: *mut dst_generator_options_t);
    /// Opens a model for generation; on failure `*out` is NULL.
    pub fn dst_generator_create(
        out: *mut *mut dst_generator_t,
        options: *const dst_generator_options_t,
    ) -> dst_status_t;
    /// Frees the generator. NULL is a no-op.
    pub fn dst_generator_destroy(generator: *mut dst_generator_t);
    /// The generator's description as JSON (owned by the generator).
    pub fn dst_generator_info_json(
        generator: *const dst_generator_t,
        out_json: *mut *const c_char,
    ) -> dst_status_t;
    /// logits `[n_seqs, seq_len, vocab_size]` of every position, forward from position 0.
    pub fn dst_generator_logits(
        generator: *mut dst_generator_t,
        tokens: *const i32,
        n_seqs: usize,
        seq_len: usize,
        logits: *mut f32,
        logits_count: usize,
    ) -> dst_status_t;
    /// The mean next-token cross-entropy against `targets` (-1 ignored).
    pub fn dst_generator_loss(
        generator: *mut dst_generator_t,
        tokens: *const i32,
        targets: *const i32,
        n_seqs: usize,
        seq_len: usize,
        out_loss: *mut c_double,
        out_counted: *mut i64,
    ) -> dst_status_t;
    /// Fills `*sampling` with defaults and its struct size.
    pub fn dst_sampling_default(sampling: *mut dst_sampling_t);
    /// Continues the prompt with up to `max_new_tokens` tokens.
    pub fn dst_generator_generate(
        generator: *mut dst_generator_t,
        prompt: *const i32,
        prompt_len: usize,
        sampling: *const dst_sampling_t,
        on_token: dst_token_callback_t,
        user_data: *mut std::os::raw::c_void,
        out_tokens: *mut i32,
        out_capacity: usize,
        out_count: *mut usize,
        out_stop_reason: *mut *const c_char,
    ) -> dst_status_t;

    /// Opens a tokenizer file or directory; on failure `*out` is NULL.
    pub fn dst_tokenizer_open(out: *mut *mut dst_tokenizer_t, path: *const c_char) -> dst_status_t;
    /// Frees the tokenizer. NULL is a no-op.
    pub fn dst_tokenizer_destroy(tokenizer: *mut dst_tokenizer_t);
    /// The tokenizer's description as JSON (owned by the tokenizer).
    pub fn dst_tokenizer_info_json(
        tokenizer: *const dst_tokenizer_t,
        out_json: *mut *const c_char,
    ) -> dst_status_t;
    /// The ids of `text[0, length)` (thread-local, valid until the next encode).
    pub fn dst_tokenizer_encode(
        tokenizer: *const dst_tokenizer_t,
        text: *const c_char,
        length: usize,
        add_special: c_int,
        out_ids: *mut *const i32,
        out_count: *mut usize,
    ) -> dst_status_t;
    /// The UTF-8 text of `ids[0, n)` (thread-local, valid until the next decode).
    pub fn dst_tokenizer_decode(
        tokenizer: *const dst_tokenizer_t,
        ids: *const i32,
        n: usize,
        out_text: *mut *const c_char,
        out_length: *mut usize,
    ) -> dst_status_t;
    /// Fills `*options` with defaults and its struct size.
    pub fn dst_tokenize_options_default(options: *mut dst_tokenize_options_t);
    /// Tokenizes files into llm.c's token-file format.
    pub fn dst_tokenize_files(
        tokenizer: *const dst_tokenizer_t,
        files: *const *const c_char,
        n_files: usize,
        out_path: *const c_char,
        val_out_path: *const c_char,
        options: *const dst_tokenize_options_t,
        progress: dst_progress_callback_t,
        user_data: *mut std::os::raw::c_void,
        out_json: *mut *const c_char,
    ) -> dst_status_t;
}
