//! Text generation and evaluation from a trained model (`dst_generator_*`).
use std::os::raw::{c_char, c_int, c_void};
use std::path::Path;
use std::ptr::{self, NonNull};

use dstrain_sys as sys;

use crate::error::{check, string_from_ptr, Error, Result, Status};
use crate::util::{cstring, path_cstring};

/// How the next token is chosen, as Hugging Face's `generate()` with sampling: logits divided
/// by `temperature` (0: greedy), the `top_k` largest kept (0: all), then the most probable
/// tokens reaching `top_p` (1: all). The n-th token's draw depends on (`seed`, n) alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Tokens to generate at most.
    pub max_new_tokens: usize,
    /// Temperature; 0: greedy decoding.
    pub temperature: f64,
    /// Keep the `top_k` most likely tokens; 0: all.
    pub top_k: usize,
    /// Keep the most likely tokens whose probability reaches `top_p`; 1: all.
    pub top_p: f64,
    /// The sampling seed.
    pub seed: u64,
    /// Run one position per token over the key/value cache (false: the whole sequence again).
    pub use_cache: bool,
    /// Stop after one of the model's end-of-sequence ids.
    pub stop_at_eos: bool,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            max_new_tokens: 64,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            use_cache: true,
            stop_at_eos: true,
        }
    }
}

/// The new tokens and why the generation stopped ("length", "eos", "context" or "caller").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// The new tokens, not the prompt.
    pub tokens: Vec<i32>,
    /// Why it stopped.
    pub stop_reason: String,
}

/// A trained language model opened for inference: a dstrain checkpoint of any training layout
/// or a Hugging Face model directory. Destroyed on drop; `Send`, not `Sync`.
#[derive(Debug)]
pub struct Generator {
    raw: NonNull<sys::dst_generator_t>,
    vocab_size: usize,
    context: usize,
    info: String,
}

// SAFETY: calls on one handle never overlap (they take &mut self or &self without interior
// mutation on the C side); moving the Generator moves exclusive ownership.
unsafe impl Send for Generator {}

impl Drop for Generator {
    fn drop(&mut self) {
        // SAFETY: `raw` came from dst_generator_create and is destroyed exactly once.
        unsafe { sys::dst_generator_destroy(self.raw.as_ptr()) }
    }
}

/// What to open: see [`Generator::from_checkpoint`], [`Generator::from_model_dir`],
/// [`Generator::from_model_json`].
#[derive(Debug, Clone, Default)]
pub struct GeneratorOptions {
    /// Positions a sequence may fill, prompt included; 0: the model's.
    pub context: i64,
    /// Sequences one logits / loss call may carry; 0: 1.
    pub batch: i64,
    /// CPU threads; 0: the default.
    pub threads: i32,
    /// "fp32" (default) or "bf16".
    pub precision: Option<String>,
}

fn opt_ptr(s: &Option<std::ffi::CString>) -> *const c_char {
    s.as_ref().map_or(ptr::null(), |c| c.as_ptr())
}

impl Generator {
    /// Opens a dstrain checkpoint directory (`tag` None: its latest).
    pub fn from_checkpoint(
        dir: impl AsRef<Path>,
        tag: Option<&str>,
        options: &GeneratorOptions,
    ) -> Result<Generator> {
        let dir = path_cstring(dir.as_ref(), "checkpoint directory")?;
        let tag = tag.map(|t| cstring(t, "tag")).transpose()?;
        Generator::open(Some(dir), tag, None, None, options)
    }

    /// Opens a Hugging Face model directory (or a model spec file: its seeded weights).
    pub fn from_model_dir(path: impl AsRef<Path>, options: &GeneratorOptions) -> Result<Generator> {
        let path = path_cstring(path.as_ref(), "model path")?;
        Generator::open(None, None, None, Some(path), options)
    }

    /// Opens a model spec given as JSON (its seeded initial weights).
    pub fn from_model_json(json: &str, options: &GeneratorOptions) -> Result<Generator> {
        let json = cstring(json, "model spec")?;
        Generator::open(None, None, Some(json), None, options)
    }

    fn open(
        checkpoint: Option<std::ffi::CString>,
        tag: Option<std::ffi::CString>,
        model_json: Option<std::ffi::CString>,
        model_path: Option<std::ffi::CString>,
        options: &GeneratorOptions,
    ) -> Result<Generator> {
        crate::check_version()?;
        let precision = options
            .precision
            .as_deref()
            .map(|p| cstring(p, "precision"))
            .transpose()?;
        let mut o = std::mem::MaybeUninit::<sys::dst_generator_options_t>::uninit();
        // SAFETY: dst_generator_options_default writes the whole struct.
        let mut o = unsafe {
            sys::dst_generator_options_default(o.as_mut_ptr());
            o.assume_init()
        };
        o.checkpoint_dir = opt_ptr(&checkpoint);
        o.checkpoint_tag = opt_ptr(&tag);
        o.model_json = opt_ptr(&model_json);
        o.model_path = opt_ptr(&model_path);
        o.context = options.context;
        o.batch = options.batch;
        o.num_threads = options.threads;
        o.precision = opt_ptr(&precision);
        let mut raw: *mut sys::dst_generator_t = ptr::null_mut();
        // SAFETY: the options and the strings they point to outlive the call.
        check(unsafe { sys::dst_generator_create(&mut raw, &o) })?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(
                Status::Internal,
                "dst_generator_create returned NULL".to_string(),
            )
        })?;
        let mut json: *const c_char = ptr::null();
        // SAFETY: `raw` is a live generator; the string is owned by it and copied at once.
        check(unsafe { sys::dst_generator_info_json(raw.as_ptr(), &mut json) })?;
        let info = unsafe { string_from_ptr(json) };
        let number = |key: &str| -> usize {
            let at = info
                .find(&format!("\"{}\":", key))
                .map(|i| i + key.len() + 3);
            at.and_then(|i| {
                info[i..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|d| d.parse().ok())
            })
            .unwrap_or(0)
        };
        let (vocab_size, context) = (number("vocab_size"), number("context"));
        Ok(Generator {
            raw,
            vocab_size,
            context,
            info,
        })
    }

    /// The model's vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Positions a sequence may fill.
    pub fn context(&self) -> usize {
        self.context
    }

    /// The description `dst_generator_info_json` gives, as JSON text.
    pub fn info_json(&self) -> &str {
        &self.info
    }

    /// The logits `[n_seqs, seq_len, vocab_size]` of every position of `tokens`
    /// (`n_seqs * seq_len` ids, row-major).
    pub fn logits(&mut self, tokens: &[i32], n_seqs: usize, seq_len: usize) -> Result<Vec<f32>> {
        if tokens.len() != n_seqs * seq_len {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("{} tokens given for {} x {}", tokens.len(), n_seqs, seq_len),
            ));
        }
        let mut out = vec![0f32; n_seqs * seq_len * self.vocab_size];
        // SAFETY: the buffers hold the counts passed.
        check(unsafe {
            sys::dst_generator_logits(
                self.raw.as_ptr(),
                tokens.as_ptr(),
                n_seqs,
                seq_len,
                out.as_mut_ptr(),
                out.len(),
            )
        })?;
        Ok(out)
    }

    /// The mean next-token cross-entropy of `tokens` against `targets` (-1: ignored), both
    /// `[n_seqs, seq_len]`.
    pub fn loss(
        &mut self,
        tokens: &[i32],
        targets: &[i32],
        n_seqs: usize,
        seq_len: usize,
    ) -> Result<f64> {
        if tokens.len() != n_seqs * seq_len || targets.len() != tokens.len() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "{} tokens and {} targets given for {} x {}",
                    tokens.len(),
                    targets.len(),
                    n_seqs,
                    seq_len
                ),
            ));
        }
        let mut loss = 0f64;
        // SAFETY: the buffers hold the counts passed.
        check(unsafe {
            sys::dst_generator_loss(
                self.raw.as_ptr(),
                tokens.as_ptr(),
                targets.as_ptr(),
                n_seqs,
                seq_len,
                &mut loss,
                ptr::null_mut(),
            )
        })?;
        Ok(loss)
    }

    /// Continues `prompt` (token ids); `on_token` sees each new token as it comes and stops
    /// the generation by returning false.
    pub fn generate<F: FnMut(i32) -> bool>(
        &mut self,
        prompt: &[i32],
        sampling: &Sampling,
        mut on_token: F,
    ) -> Result<Generated> {
        let mut s = std::mem::MaybeUninit::<sys::dst_sampling_t>::uninit();
        // SAFETY: dst_sampling_default writes the whole struct.
        let mut s = unsafe {
            sys::dst_sampling_default(s.as_mut_ptr());
            s.assume_init()
        };
        s.max_new_tokens = sampling.max_new_tokens as i64;
        s.temperature = sampling.temperature;
        s.top_k = sampling.top_k as i64;
        s.top_p = sampling.top_p;
        s.seed = sampling.seed;
        s.use_cache = sampling.use_cache as i32;
        s.stop_at_eos = sampling.stop_at_eos as i32;
        unsafe extern "C" fn trampoline<F: FnMut(i32) -> bool>(
            user: *mut c_void,
            token: i32,
        ) -> c_int {
            // SAFETY: `user` is the &mut F passed below, alive for the whole call.
            let f = &mut *(user as *mut F);
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(token))) {
                Ok(true) => 0,
                _ => 1,
            }
        }
        let mut out = vec![0i32; sampling.max_new_tokens.max(1)];
        let mut count = 0usize;
        let mut stop: *const c_char = ptr::null();
        // SAFETY: the buffers hold the counts passed; the callback's user data is `on_token`,
        // which outlives the call.
        check(unsafe {
            sys::dst_generator_generate(
                self.raw.as_ptr(),
                prompt.as_ptr(),
                prompt.len(),
                &s,
                Some(trampoline::<F>),
                &mut on_token as *mut F as *mut c_void,
                out.as_mut_ptr(),
                out.len(),
                &mut count,
                &mut stop,
            )
        })?;
        out.truncate(count);
        Ok(Generated {
            tokens: out,
            // SAFETY: the stop reason is a static string.
            stop_reason: unsafe { string_from_ptr(stop) },
        })
    }
}
