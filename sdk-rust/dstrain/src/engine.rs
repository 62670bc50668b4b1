//! The training engine.
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

use dstrain_sys as sys;

use crate::batch::Batch;
use crate::error::{check, string_from_ptr, Error, Result, Status};
use crate::util::{cstring, path_cstring};

/// Where a ds_config or model spec comes from: a JSON text or a file path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The JSON document itself.
    Json(String),
    /// A path to a JSON file.
    Path(PathBuf),
}

impl Source {
    /// A JSON text.
    pub fn json(text: impl Into<String>) -> Source {
        Source::Json(text.into())
    }

    /// A path to a JSON file.
    pub fn path(path: impl Into<PathBuf>) -> Source {
        Source::Path(path.into())
    }

    /// The (json, path) pair of C strings, exactly one of them set.
    fn to_c(&self, what: &str) -> Result<(Option<CString>, Option<CString>)> {
        match self {
            Source::Json(text) => Ok((Some(cstring(text, what)?), None)),
            Source::Path(path) => Ok((None, Some(path_cstring(path, what)?))),
        }
    }
}

/// Builds an [`Engine`]: a ds_config, a model spec, and optionally the planned step count.
///
/// ```no_run
/// # fn main() -> Result<(), dstrain::Error> {
/// let engine = dstrain::Engine::builder()
///     .config_path("ds_config.json")
///     .model_json(r#"{"type": "gpt", "vocab_size": 256, "n_ctx": 64,
///                     "n_layer": 2, "n_head": 4, "d_model": 64}"#)
///     .total_steps(1000)
///     .build()?;
/// # drop(engine); Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct EngineBuilder {
    config: Option<Source>,
    model: Option<Source>,
    total_steps: u64,
}

impl EngineBuilder {
    /// Sets the ds_config.
    pub fn config(mut self, config: Source) -> Self {
        self.config = Some(config);
        self
    }

    /// Sets the ds_config from a JSON text.
    pub fn config_json(self, json: impl Into<String>) -> Self {
        self.config(Source::json(json))
    }

    /// Sets the ds_config from a `ds_config.json` path.
    pub fn config_path(self, path: impl Into<PathBuf>) -> Self {
        self.config(Source::path(path))
    }

    /// Sets the model spec.
    pub fn model(mut self, model: Source) -> Self {
        self.model = Some(model);
        self
    }

    /// Sets the model spec from a JSON text.
    pub fn model_json(self, json: impl Into<String>) -> Self {
        self.model(Source::json(json))
    }

    /// Sets the model spec from a path.
    pub fn model_path(self, path: impl Into<PathBuf>) -> Self {
        self.model(Source::path(path))
    }

    /// The planned number of optimizer steps; resolves `"auto"` in
    /// `scheduler.params.total_num_steps`. 0 (the default) means unknown.
    pub fn total_steps(mut self, steps: u64) -> Self {
        self.total_steps = steps;
        self
    }

    /// Creates the engine: builds the model, allocates parameters, gradients, optimizer state
    /// and activations, and initialises the weights from the model spec's seed.
    ///
    /// Errors: [`Status::Config`] for a malformed or inconsistent config or spec (the message
    /// names the JSON path and, for an unknown key, the nearest known key),
    /// [`Status::NotSupported`] for a recognised feature that is not built yet,
    /// [`Status::Io`] for an unreadable file, [`Status::InvalidArgument`] when the config or
    /// model is missing.
    pub fn build(self) -> Result<Engine> {
        crate::check_version()?;
        let mut raw: *mut sys::dst_engine_t = ptr::null_mut();
        self.with_options(|options| {
            // SAFETY: `options` and the strings it points to live until the call returns;
            // `raw` is a valid out pointer.
            check(unsafe { sys::dst_engine_create(&mut raw, options) })
        })??;
        match NonNull::new(raw) {
            Some(raw) => Ok(Engine {
                raw,
                lifetime: Arc::new(Lifetime { freed: Mutex::new(false) }),
            }),
            None => Err(Error::new(
                Status::Internal,
                "dst_engine_create returned DST_OK but no engine",
            )),
        }
    }

    /// Per-rank model-state memory of this config and model for each ZeRO stage 0-3 at
    /// `world_size` ranks, as the library's JSON object (`num_parameters`, `world_size`,
    /// `dp_size`, `configured_stage`, `stages: [{stage, parameters_bytes, gradients_bytes,
    /// optimizer_state_bytes, total_bytes, supported}]`, ...). Nothing is allocated; errors as
    /// for [`EngineBuilder::build`].
    pub fn estimate_memory_json(&self, world_size: u64) -> Result<String> {
        crate::check_version()?;
        let world_size = i64::try_from(world_size).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!("world_size {} is larger than i64::MAX", world_size),
            )
        })?;
        let mut json: *const c_char = ptr::null();
        self.with_options(|options| {
            // SAFETY: `options` and its strings live until the call returns; `json` is a
            // valid out pointer.
            check(unsafe { sys::dst_estimate_memory_json(options, world_size, &mut json) })
        })??;
        // SAFETY: thread-local, valid until the next call on this thread; copied now.
        Ok(unsafe { string_from_ptr(json) })
    }

    /// Calls `f` with the C options for this builder (the strings live during the call).
    fn with_options<R>(&self, f: impl FnOnce(&sys::dst_engine_options_t) -> R) -> Result<R> {
        let (config_json, config_path) = match &self.config {
            Some(s) => s.to_c("config")?,
            None => (None, None),
        };
        let (model_json, model_path) = match &self.model {
            Some(s) => s.to_c("model")?,
            None => (None, None),
        };
        let total_steps = i64::try_from(self.total_steps).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!("total_steps {} is larger than i64::MAX", self.total_steps),
            )
        })?;
        fn opt_ptr(s: &Option<CString>) -> *const c_char {
            s.as_ref().map_or(ptr::null(), |c| c.as_ptr())
        }
        let options = sys::dst_engine_options_t {
            struct_size: std::mem::size_of::<sys::dst_engine_options_t>(),
            config_json: opt_ptr(&config_json),
            config_path: opt_ptr(&config_path),
            model_json: opt_ptr(&model_json),
            model_path: opt_ptr(&model_path),
            total_steps,
        };
        Ok(f(&options))
    }
}

/// The kind of model an engine trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModelType {
    /// GPT-2-style language model (`DST_MODEL_GPT`): batches are token ids.
    Gpt,
    /// Sequential stack of layers (`DST_MODEL_SEQUENTIAL`): batches are feature vectors.
    Sequential,
    /// A value this crate does not know (from a newer library).
    Unknown(u32),
}

/// The loss an engine minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossType {
    /// Cross-entropy (`DST_LOSS_CROSS_ENTROPY`): targets are class / token ids.
    CrossEntropy,
    /// Mean squared error (`DST_LOSS_MSE`): labels are floats.
    Mse,
    /// A value this crate does not know (from a newer library).
    Unknown(u32),
}

/// What a caller needs to shape its batches (`dst_engine_info_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Info {
    /// GPT or sequential.
    pub model_type: ModelType,
    /// Cross-entropy or MSE.
    pub loss_type: LossType,
    /// Trainable scalars (tied weights counted once).
    pub num_parameters: u64,
    /// Global samples per optimizer step.
    pub train_batch_size: usize,
    /// Samples per micro-step per rank.
    pub micro_batch_size: usize,
    /// Micro-steps per optimizer step.
    pub grad_accum_steps: usize,
    /// Data-parallel ranks.
    pub dp_size: usize,
    /// This process's global rank.
    pub rank: usize,
    /// Processes in the job.
    pub world_size: usize,
    /// GPT: maximum context (n_ctx); sequential: 0.
    pub seq_len: usize,
    /// GPT: vocabulary size; sequential: 0.
    pub vocab_size: usize,
    /// Sequential: features per sample; GPT: 0.
    pub input_dim: usize,
    /// Sequential: outputs (classes) per sample; GPT: the vocabulary size.
    pub output_dim: usize,
    /// This rank's data-parallel index (its slice of each global batch).
    pub dp_rank: usize,
    /// Pipeline stages.
    pub pp_size: usize,
    /// This rank's pipeline stage.
    pub pp_rank: usize,
    /// Tensor-parallel ranks.
    pub tp_size: usize,
    /// This rank's tensor-parallel index.
    pub tp_rank: usize,
}

impl Info {
    /// Samples one [`Engine::train_batch`] call takes on this rank:
    /// `micro_batch_size * grad_accum_steps`.
    pub fn samples_per_step(&self) -> usize {
        self.micro_batch_size * self.grad_accum_steps
    }
}

/// A named parameter tensor (`dst_tensor_info_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    /// PyTorch-style name, e.g. `transformer.h.0.attn.c_attn.weight`.
    pub name: String,
    /// Extent of each dimension (nn.Linear weights are `[out, in]`).
    pub shape: Vec<usize>,
    /// Element count (the product of `shape`).
    pub numel: usize,
}

/// A training engine: one model, its optimizer state and its configuration.
///
/// Created with [`Engine::builder`] or [`Engine::new`]; destroyed on drop. Every fallible
/// call returns [`Result`], whose [`Error`] carries the status and the library's message.
///
/// # Threads
///
/// `Engine` is [`Send`]: it may be moved to another thread. It is not [`Sync`]: the header
/// forbids concurrent calls on one handle, and methods taking `&self` (such as
/// [`Engine::get_param`]) would otherwise be callable from two threads at once. Different
/// engines may train on different threads, but they share the process-wide BLAS/OpenMP
/// thread pool and therefore the cores.
///
/// There are no callbacks from the library into Rust, so no Rust panic can unwind through
/// C frames; the library in turn catches its C++ exceptions at the boundary.
///
/// ```compile_fail,E0277
/// fn assert_sync<T: Sync>() {}
/// assert_sync::<dstrain::Engine>(); // Engine is Send but not Sync
/// ```
#[derive(Debug)]
pub struct Engine {
    raw: NonNull<sys::dst_engine_t>,
    lifetime: Arc<Lifetime>,
}

/// Whether the handle was freed (destroyed or aborted), shared by an [`Engine`] and its
/// [`AbortHandle`]s so that exactly one of them frees it and none reaches it afterwards.
#[derive(Debug)]
struct Lifetime {
    freed: Mutex<bool>,
}

// SAFETY: the header allows a handle to be used from any thread as long as calls on it do
// not overlap. Moving the Engine moves exclusive ownership of the handle, and the type is not
// Sync, so calls can never overlap.
unsafe impl Send for Engine {}

impl Drop for Engine {
    fn drop(&mut self) {
        let mut freed = self.lifetime.freed.lock().unwrap_or_else(|e| e.into_inner());
        if !*freed {
            // SAFETY: `raw` came from dst_engine_create and is freed exactly once (`freed`).
            unsafe { sys::dst_engine_destroy(self.raw.as_ptr()) }
            *freed = true;
        }
    }
}

/// Aborts an [`Engine`] from another thread (`dst_engine_abort`), for a watchdog or a
/// signal-handling thread: a call the engine's thread is running returns
/// [`Status::Aborted`] within about a second, even when it waits on a peer that will never
/// answer, and the engine is freed. Every later call on the engine returns an error; dropping
/// it does nothing more. Cheap to clone; `Send` and `Sync`.
///
/// ```no_run
/// # fn demo(mut engine: dstrain::Engine, batch: dstrain::TokenBatch) {
/// let abort = engine.abort_handle();
/// std::thread::spawn(move || {
///     // ... wait for a signal, a deadline or a word from the launcher ...
///     abort.abort();
/// });
/// match engine.train_batch(&batch) {
///     Err(e) if e.status() == dstrain::Status::Aborted => eprintln!("stopped: {e}"),
///     other => { other.unwrap(); }
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct AbortHandle {
    raw: NonNull<sys::dst_engine_t>,
    lifetime: Arc<Lifetime>,
}

// SAFETY: dst_engine_abort may be called from any thread, also while another thread's call
// on the same handle runs; `lifetime` makes sure it is never called after the handle was freed.
unsafe impl Send for AbortHandle {}
// SAFETY: as above; abort takes `&self` and serialises on `lifetime`.
unsafe impl Sync for AbortHandle {}

impl AbortHandle {
    /// Aborts the engine (see [`AbortHandle`]); returns once its running call, if any, has
    /// returned. A no-op once the engine was dropped or aborted.
    pub fn abort(&self) {
        let mut freed = self.lifetime.freed.lock().unwrap_or_else(|e| e.into_inner());
        if !*freed {
            // SAFETY: `raw` is live (not freed, checked under the lock the Engine's Drop
            // takes); the library allows this call while another thread's call runs, and keeps
            // the aborted handle's address dead, so the Engine's later calls only get errors.
            unsafe { sys::dst_engine_abort(self.raw.as_ptr()) }
            *freed = true;
        }
    }
}

impl Engine {
    /// Frees the engine without waiting for the other ranks (`dst_engine_abort`, like
    /// `ncclCommAbort`), for a rank that has seen a peer fail. Dropping an engine says goodbye
    /// to the other ranks of a multi-process job and may wait for them (up to
    /// `comm_timeout_seconds`); this closes the connections at once.
    pub fn abort(self) {
        AbortHandle { raw: self.raw, lifetime: Arc::clone(&self.lifetime) }.abort();
    }

    /// A handle that aborts this engine from another thread (see [`AbortHandle`]).
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle { raw: self.raw, lifetime: Arc::clone(&self.lifetime) }
    }

    /// A builder for an engine (config, model, planned step count).
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Creates an engine from a ds_config and a model spec; see [`EngineBuilder::build`].
    pub fn new(config: Source, model: Source) -> Result<Engine> {
        Engine::builder().config(config).model(model).build()
    }

    /// The raw handle, for calling `dstrain_sys` functions this crate does not wrap. The
    /// engine keeps ownership; the handle is valid while the engine lives.
    pub fn as_raw(&self) -> *mut sys::dst_engine_t {
        self.raw.as_ptr()
    }

    /// Model type, loss, parameter count and batch geometry.
    pub fn info(&self) -> Result<Info> {
        // SAFETY: dst_engine_info_t is plain data; all-zero is a valid value.
        let mut raw: sys::dst_engine_info_t = unsafe { std::mem::zeroed() };
        raw.struct_size = std::mem::size_of::<sys::dst_engine_info_t>();
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::dst_engine_get_info(self.raw.as_ptr(), &mut raw) })?;
        let size = |v: i64| usize::try_from(v).unwrap_or(0);
        Ok(Info {
            model_type: match raw.model_type {
                sys::DST_MODEL_GPT => ModelType::Gpt,
                sys::DST_MODEL_SEQUENTIAL => ModelType::Sequential,
                other => ModelType::Unknown(other),
            },
            loss_type: match raw.loss_type {
                sys::DST_LOSS_CROSS_ENTROPY => LossType::CrossEntropy,
                sys::DST_LOSS_MSE => LossType::Mse,
                other => LossType::Unknown(other),
            },
            num_parameters: u64::try_from(raw.num_parameters).unwrap_or(0),
            train_batch_size: size(raw.train_batch_size),
            micro_batch_size: size(raw.micro_batch_size),
            grad_accum_steps: size(raw.grad_accum_steps),
            dp_size: size(raw.dp_size),
            rank: size(raw.rank),
            world_size: size(raw.world_size),
            seq_len: size(raw.seq_len),
            vocab_size: size(raw.vocab_size),
            input_dim: size(raw.input_dim),
            output_dim: size(raw.output_dim),
            dp_rank: size(raw.dp_rank),
            pp_size: size(raw.pp_size),
            pp_rank: size(raw.pp_rank),
            tp_size: size(raw.tp_size),
            tp_rank: size(raw.tp_rank),
        })
    }

    /// One optimizer step: forward and backward over the micro-batches (gradients averaged),
    /// clipping, optimizer update, LR schedule step. Returns the mean loss.
    ///
    /// `batch.n_samples()` must equal [`Info::samples_per_step`]. On error (for example
    /// [`Status::Numeric`] for a non-finite loss) the weights are unchanged.
    pub fn train_batch<'a>(&mut self, batch: impl Into<Batch<'a>>) -> Result<f32> {
        self.run_batch(batch.into(), sys::dst_engine_train_batch)
    }

    /// Forward only, no state change. Returns the mean loss.
    pub fn eval_batch<'a>(&mut self, batch: impl Into<Batch<'a>>) -> Result<f32> {
        self.run_batch(batch.into(), sys::dst_engine_eval_batch)
    }

    /// Forward and backward without an optimizer step: leaves the gradients (mean over the
    /// batch's micro-batches, before clipping) readable with [`Engine::get_grad`]. Does not
    /// advance the step count. Returns the mean loss.
    pub fn forward_backward<'a>(&mut self, batch: impl Into<Batch<'a>>) -> Result<f32> {
        self.run_batch(batch.into(), sys::dst_engine_forward_backward)
    }

    /// [`Engine::train_batch`] for a GPT: `tokens` and `targets` are `[n_samples, seq_len]`.
    pub fn train_batch_tokens(
        &mut self,
        tokens: &[i32],
        targets: &[i32],
        n_samples: usize,
        seq_len: usize,
    ) -> Result<f32> {
        self.train_batch(Batch::tokens(tokens, targets, n_samples, seq_len))
    }

    /// [`Engine::eval_batch`] for a GPT: `tokens` and `targets` are `[n_samples, seq_len]`.
    pub fn eval_batch_tokens(
        &mut self,
        tokens: &[i32],
        targets: &[i32],
        n_samples: usize,
        seq_len: usize,
    ) -> Result<f32> {
        self.eval_batch(Batch::tokens(tokens, targets, n_samples, seq_len))
    }

    /// [`Engine::train_batch`] for a sequential model with MSE loss: `inputs` is
    /// `[n_samples, input_dim]`, `labels` is `[n_samples, output_dim]`.
    pub fn train_batch_features(
        &mut self,
        inputs: &[f32],
        labels: &[f32],
        n_samples: usize,
    ) -> Result<f32> {
        self.train_batch(Batch::regression(inputs, labels, n_samples))
    }

    /// [`Engine::train_batch`] for a sequential model with cross-entropy loss: `inputs` is
    /// `[n_samples, input_dim]`, `class_ids` is `[n_samples]`.
    pub fn train_batch_classes(
        &mut self,
        inputs: &[f32],
        class_ids: &[i32],
        n_samples: usize,
    ) -> Result<f32> {
        self.train_batch(Batch::classification(inputs, class_ids, n_samples))
    }

    fn run_batch(
        &mut self,
        batch: Batch<'_>,
        call: unsafe extern "C" fn(
            *mut sys::dst_engine_t,
            *const sys::dst_batch_t,
            *mut f32,
        ) -> sys::dst_status_t,
    ) -> Result<f32> {
        let raw = batch.to_raw();
        let mut loss = 0.0f32;
        // SAFETY: `raw` points into slices borrowed by `batch`, alive for this call, with
        // their true lengths as counts; the library reads at most `count` elements of each.
        check(unsafe { call(self.raw.as_ptr(), &raw, &mut loss) })?;
        Ok(loss)
    }

    /// Optimizer steps taken so far.
    pub fn step_count(&self) -> Result<u64> {
        let mut steps = 0i64;
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::dst_engine_step_count(self.raw.as_ptr(), &mut steps) })?;
        Ok(u64::try_from(steps).unwrap_or(0))
    }

    /// The learning rate the next optimizer step will use.
    pub fn learning_rate(&self) -> Result<f64> {
        let mut lr = 0.0f64;
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::dst_engine_learning_rate(self.raw.as_ptr(), &mut lr) })?;
        Ok(lr)
    }

    /// fp16: the current loss scale and the steps skipped on overflow (1.0
    /// and 0 under fp32 and bf16).
    pub fn loss_scale(&self) -> Result<(f64, u64)> {
        let mut scale = 0.0f64;
        let mut skipped = 0i64;
        // SAFETY: valid handle and out pointers.
        check(unsafe { sys::dst_engine_loss_scale(self.raw.as_ptr(), &mut scale, &mut skipped) })?;
        Ok((scale, u64::try_from(skipped).unwrap_or(0)))
    }

    /// Number of named parameter tensors (a tied weight is listed once).
    pub fn param_count(&self) -> Result<usize> {
        let mut count = 0usize;
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::dst_engine_param_count(self.raw.as_ptr(), &mut count) })?;
        Ok(count)
    }

    fn raw_param_info(&self, index: usize) -> Result<sys::dst_tensor_info_t> {
        // SAFETY: dst_tensor_info_t is plain data; all-zero (NULL name) is a valid value.
        let mut raw: sys::dst_tensor_info_t = unsafe { std::mem::zeroed() };
        raw.struct_size = std::mem::size_of::<sys::dst_tensor_info_t>();
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::dst_engine_param_info(self.raw.as_ptr(), index, &mut raw) })?;
        Ok(raw)
    }

    /// Every parameter tensor's name, shape and element count, in the engine's order.
    pub fn parameters(&self) -> Result<Vec<ParamInfo>> {
        let count = self.param_count()?;
        let mut params = Vec::with_capacity(count);
        for index in 0..count {
            let raw = self.raw_param_info(index)?;
            let ndim = usize::try_from(raw.ndim)
                .unwrap_or(0)
                .min(sys::DST_MAX_DIMS);
            params.push(ParamInfo {
                // SAFETY: the name is owned by the engine and valid while it lives.
                name: unsafe { string_from_ptr(raw.name) },
                shape: raw.shape[..ndim]
                    .iter()
                    .map(|&d| usize::try_from(d).unwrap_or(0))
                    .collect(),
                numel: usize::try_from(raw.numel).unwrap_or(0),
            });
        }
        Ok(params)
    }

    /// The element count of parameter `name`, or None if there is no such parameter.
    fn numel_of(&self, name: &CStr) -> Result<Option<usize>> {
        for index in 0..self.param_count()? {
            let raw = self.raw_param_info(index)?;
            // SAFETY: the name is owned by the engine and valid while it lives.
            if !raw.name.is_null() && unsafe { CStr::from_ptr(raw.name) } == name {
                return Ok(Some(usize::try_from(raw.numel).unwrap_or(0)));
            }
        }
        Ok(None)
    }

    /// Copies parameter or gradient `name` into a new vector (`get` is
    /// dst_engine_get_param or dst_engine_get_grad).
    fn read_tensor(
        &self,
        name: &str,
        get: unsafe extern "C" fn(
            *const sys::dst_engine_t,
            *const c_char,
            *mut f32,
            usize,
        ) -> sys::dst_status_t,
    ) -> Result<Vec<f32>> {
        let cname = cstring(name, "parameter name")?;
        match self.numel_of(&cname)? {
            Some(numel) => {
                let mut data = vec![0.0f32; numel];
                let mut dummy = 0.0f32;
                let out = if numel == 0 {
                    &mut dummy as *mut f32
                } else {
                    data.as_mut_ptr()
                };
                // SAFETY: `out` has room for `numel` floats; the name is NUL-terminated.
                check(unsafe { get(self.raw.as_ptr(), cname.as_ptr(), out, numel) })?;
                Ok(data)
            }
            None => {
                // Unknown name: let the library say so (it lists what exists).
                let mut dummy = 0.0f32;
                // SAFETY: count 0 with a valid one-float buffer; the library fails before
                // writing anything for an unknown name.
                check(unsafe { get(self.raw.as_ptr(), cname.as_ptr(), &mut dummy, 0) })?;
                Ok(Vec::new())
            }
        }
    }

    fn read_tensor_into(
        &self,
        name: &str,
        out: &mut [f32],
        get: unsafe extern "C" fn(
            *const sys::dst_engine_t,
            *const c_char,
            *mut f32,
            usize,
        ) -> sys::dst_status_t,
    ) -> Result<()> {
        let cname = cstring(name, "parameter name")?;
        let mut dummy = 0.0f32;
        let ptr = if out.is_empty() {
            &mut dummy as *mut f32
        } else {
            out.as_mut_ptr()
        };
        // SAFETY: `ptr` has room for `out.len()` floats (or is a one-float dummy for 0); the
        // library writes only when the count equals the tensor's numel.
        check(unsafe { get(self.raw.as_ptr(), cname.as_ptr(), ptr, out.len()) })
    }

    /// A copy of parameter `name` (row-major, [`ParamInfo::numel`] floats).
    pub fn get_param(&self, name: &str) -> Result<Vec<f32>> {
        self.read_tensor(name, sys::dst_engine_get_param)
    }

    /// Copies parameter `name` into `out`, whose length must equal the tensor's numel.
    pub fn get_param_into(&self, name: &str, out: &mut [f32]) -> Result<()> {
        self.read_tensor_into(name, out, sys::dst_engine_get_param)
    }

    /// A copy of the gradient of parameter `name`, as left by the last
    /// [`Engine::forward_backward`] or [`Engine::train_batch`].
    pub fn get_grad(&self, name: &str) -> Result<Vec<f32>> {
        self.read_tensor(name, sys::dst_engine_get_grad)
    }

    /// Copies the gradient of parameter `name` into `out` (length = the tensor's numel).
    pub fn get_grad_into(&self, name: &str, out: &mut [f32]) -> Result<()> {
        self.read_tensor_into(name, out, sys::dst_engine_get_grad)
    }

    /// Overwrites parameter `name` with `data` (length = the tensor's numel).
    pub fn set_param(&mut self, name: &str, data: &[f32]) -> Result<()> {
        let cname = cstring(name, "parameter name")?;
        let dummy = 0.0f32;
        let ptr = if data.is_empty() {
            &dummy as *const f32
        } else {
            data.as_ptr()
        };
        // SAFETY: `ptr` holds `data.len()` floats (or is a one-float dummy for 0).
        check(unsafe {
            sys::dst_engine_set_param(self.raw.as_ptr(), cname.as_ptr(), ptr, data.len())
        })
    }

    /// Writes a checkpoint to `dir/tag/` (tag `None`: `global_stepN`) and points
    /// `dir/latest` at it. The write is atomic: an interrupted save leaves the previous
    /// checkpoint intact. `client_state_json` (DeepSpeed's client_state, e.g. the data
    /// position) must be valid JSON ([`Status::InvalidArgument`] otherwise); it is stored in
    /// `meta.json` and returned by [`Engine::load_checkpoint`] as equivalent compact JSON
    /// (the library re-serialises it: whitespace removed, object keys sorted).
    pub fn save_checkpoint(
        &mut self,
        dir: impl AsRef<Path>,
        tag: Option<&str>,
        client_state_json: Option<&str>,
    ) -> Result<()> {
        let dir = path_cstring(dir.as_ref(), "checkpoint directory")?;
        let tag = tag.map(|t| cstring(t, "checkpoint tag")).transpose()?;
        let client = client_state_json
            .map(|c| cstring(c, "client state"))
            .transpose()?;
        // SAFETY: all strings are NUL-terminated and live until the call returns.
        check(unsafe {
            sys::dst_engine_save_checkpoint(
                self.raw.as_ptr(),
                dir.as_ptr(),
                tag.as_ref().map_or(ptr::null(), |t| t.as_ptr()),
                client.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            )
        })
    }

    /// Restores weights, optimizer state, step count and LR schedule from `dir/tag` (tag
    /// `None`: the tag named in `dir/latest`) and returns the saved client state as compact
    /// JSON (`"null"` if none was saved). Training continued after a load is bit-identical to the
    /// uninterrupted run (same thread count). Everything is validated before the engine
    /// changes: on error ([`Status::Checkpoint`], [`Status::Io`]) the engine is untouched.
    pub fn load_checkpoint(&mut self, dir: impl AsRef<Path>, tag: Option<&str>) -> Result<String> {
        let dir = path_cstring(dir.as_ref(), "checkpoint directory")?;
        let tag = tag.map(|t| cstring(t, "checkpoint tag")).transpose()?;
        let mut client: *const c_char = ptr::null();
        // SAFETY: strings live until the call returns; `client` is a valid out pointer and
        // is copied before the next call on the engine.
        check(unsafe {
            sys::dst_engine_load_checkpoint(
                self.raw.as_ptr(),
                dir.as_ptr(),
                tag.as_ref().map_or(ptr::null(), |t| t.as_ptr()),
                &mut client,
            )
        })?;
        // SAFETY: valid until the next call on the engine; copied now.
        Ok(unsafe { string_from_ptr(client) })
    }

    /// Loads only a checkpoint's weights (checksums verified, names and shapes matching):
    /// no optimizer state, step or model-spec check. Every rank must call it.
    pub fn load_weights(&mut self, dir: impl AsRef<Path>, tag: Option<&str>) -> Result<()> {
        let dir = path_cstring(dir.as_ref(), "checkpoint directory")?;
        let tag = tag.map(|t| cstring(t, "checkpoint tag")).transpose()?;
        // SAFETY: valid handle; the strings live until the call returns.
        check(unsafe {
            sys::dst_engine_load_weights(
                self.raw.as_ptr(),
                dir.as_ptr(),
                tag.as_ref().map_or(ptr::null(), |t| t.as_ptr()),
            )
        })
    }

    /// A JSON snapshot of the training metrics: step, loss, lr, grad norm, tokens/s,
    /// samples/s, FLOPs, seconds per phase, and bytes per memory category (current, peak).
    pub fn metrics_json(&mut self) -> Result<String> {
        let mut json: *const c_char = ptr::null();
        // SAFETY: valid handle and out pointer; the string is copied before the next call.
        check(unsafe { sys::dst_engine_metrics_json(self.raw.as_ptr(), &mut json) })?;
        // SAFETY: valid until the next call on the engine; copied now.
        Ok(unsafe { string_from_ptr(json) })
    }

    /// This rank's memory now (DeepSpeed's `memory_status`): bytes and peak
    /// bytes per category, their total, the process's resident set now and at
    /// its peak, the machine's total and available memory, as JSON.
    pub fn memory_status_json(&mut self) -> Result<String> {
        let mut json: *const c_char = ptr::null();
        // SAFETY: valid handle and out pointer; the string is copied before the next call.
        check(unsafe { sys::dst_engine_memory_status(self.raw.as_ptr(), &mut json) })?;
        // SAFETY: valid until the next call on the engine; copied now.
        Ok(unsafe { string_from_ptr(json) })
    }

    /// This rank's metrics server and dashboard (`http://127.0.0.1:9400/`),
    /// or an empty string when `dstrain.monitor.http` is off.
    pub fn monitor_url(&self) -> Result<String> {
        let mut url: *const c_char = ptr::null();
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::dst_engine_monitor_url(self.raw.as_ptr(), &mut url) })?;
        // SAFETY: valid for the life of the engine; copied now.
        Ok(unsafe { string_from_ptr(url) })
    }

    /// The resolved configuration (`"auto"` filled in) as JSON.
    pub fn config_json(&self) -> Result<String> {
        let mut json: *const c_char = ptr::null();
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::dst_engine_config_json(self.raw.as_ptr(), &mut json) })?;
        // SAFETY: valid for the life of the engine; copied now.
        Ok(unsafe { string_from_ptr(json) })
    }
}
