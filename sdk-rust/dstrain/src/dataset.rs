//! Byte-level token datasets with the library's deterministic sampler.
use std::ffi::CStr;
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};

use dstrain_sys as sys;

use crate::batch::TokenBatch;
use crate::error::{check, Error, Result, Status};
use crate::util::path_cstring;

/// A split of a [`Dataset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// The first `1 - val_fraction` of the bytes (`DST_SPLIT_TRAIN`).
    Train,
    /// The last `val_fraction` of the bytes (`DST_SPLIT_VAL`).
    Val,
}

impl Split {
    fn raw(self) -> sys::dst_split_t {
        match self {
            Split::Train => sys::DST_SPLIT_TRAIN,
            Split::Val => sys::DST_SPLIT_VAL,
        }
    }
}

/// A text file (or the default corpus) as a byte-level token stream (vocabulary 256), split
/// into train and validation parts, with a stateless sampler: a batch is a pure function of
/// (seed, split, batch index, sample index), so the data position is just the batch index.
///
/// `Dataset` is [`Send`] but not [`Sync`], like [`Engine`](crate::Engine): calls on one
/// handle must not run concurrently. Destroyed on drop.
///
/// ```compile_fail,E0277
/// fn assert_sync<T: Sync>() {}
/// assert_sync::<dstrain::Dataset>(); // Dataset is Send but not Sync
/// ```
#[derive(Debug)]
pub struct Dataset {
    raw: NonNull<sys::dst_dataset_t>,
}

// SAFETY: a handle may be used from any thread as long as calls on it do not overlap; moving
// the Dataset moves exclusive ownership, and the type is not Sync.
unsafe impl Send for Dataset {}

impl Drop for Dataset {
    fn drop(&mut self) {
        // SAFETY: `raw` came from dst_dataset_open_text/_tokens and is destroyed exactly once.
        unsafe { sys::dst_dataset_destroy(self.raw.as_ptr()) }
    }
}

impl Dataset {
    /// Opens a text file; the last `val_fraction` of its bytes is the validation split and
    /// `seed` drives the sampler. Errors: [`Status::Io`] if the file cannot be read,
    /// [`Status::InvalidArgument`] for a bad fraction.
    pub fn open_text(path: impl AsRef<Path>, val_fraction: f64, seed: u64) -> Result<Dataset> {
        let path = path_cstring(path.as_ref(), "dataset path")?;
        Dataset::open_raw(path.as_ptr(), val_fraction, seed)
    }

    /// Opens the default corpus: the files without a '.' in `/usr/share/games/fortunes`
    /// (Debian's `fortunes` package) or in `$DSTRAIN_DEFAULT_CORPUS_DIR`, concatenated by
    /// name. [`Status::Io`] if absent.
    pub fn open_default(val_fraction: f64, seed: u64) -> Result<Dataset> {
        Dataset::open_raw(ptr::null(), val_fraction, seed)
    }

    /// Opens a file of uint16 token ids: llm.c's `.bin` (256 x i32 header, magic 20240520)
    /// or nanoGPT's raw `train.bin`; the last `val_fraction` of the tokens is the validation
    /// split. [`Status::Io`] names a truncated file, an odd size or another llm.c version.
    pub fn open_tokens(path: impl AsRef<Path>, val_fraction: f64, seed: u64) -> Result<Dataset> {
        crate::check_version()?;
        let path = path_cstring(path.as_ref(), "token file path")?;
        let mut raw: *mut sys::dst_dataset_t = ptr::null_mut();
        // SAFETY: `path` is a NUL-terminated string alive for the call; `raw` is a valid out
        // pointer.
        check(unsafe {
            sys::dst_dataset_open_tokens(&mut raw, path.as_ptr(), val_fraction, seed)
        })?;
        Dataset::from_raw(raw, "dst_dataset_open_tokens")
    }

    /// The largest token id in the data (at most 255 for text).
    pub fn max_token(&self) -> Result<i64> {
        let mut out = 0i64;
        // SAFETY: `raw` is a live dataset; `out` is a valid out pointer.
        check(unsafe { sys::dst_dataset_max_token(self.raw.as_ptr(), &mut out) })?;
        Ok(out)
    }

    fn open_raw(path: *const c_char, val_fraction: f64, seed: u64) -> Result<Dataset> {
        crate::check_version()?;
        let mut raw: *mut sys::dst_dataset_t = ptr::null_mut();
        // SAFETY: `path` is NULL or a NUL-terminated string alive for the call; `raw` is a
        // valid out pointer.
        check(unsafe { sys::dst_dataset_open_text(&mut raw, path, val_fraction, seed) })?;
        Dataset::from_raw(raw, "dst_dataset_open_text")
    }

    fn from_raw(raw: *mut sys::dst_dataset_t, call: &str) -> Result<Dataset> {
        match NonNull::new(raw) {
            Some(raw) => Ok(Dataset { raw }),
            None => Err(Error::new(
                Status::Internal,
                format!("{} returned DST_OK but no dataset", call),
            )),
        }
    }

    /// The raw handle, for `dstrain_sys` calls. The dataset keeps ownership.
    pub fn as_raw(&self) -> *mut sys::dst_dataset_t {
        self.raw.as_ptr()
    }

    /// Tokens (bytes) in a split.
    pub fn num_tokens(&self, split: Split) -> Result<usize> {
        let mut n = 0usize;
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::dst_dataset_num_tokens(self.raw.as_ptr(), split.raw(), &mut n) })?;
        Ok(n)
    }

    /// The path the dataset was read from (for the default corpus: its directory).
    pub fn path(&self) -> Result<PathBuf> {
        let mut p: *const c_char = ptr::null();
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::dst_dataset_path(self.raw.as_ptr(), &mut p) })?;
        if p.is_null() {
            return Ok(PathBuf::new());
        }
        // SAFETY: owned by the dataset, valid while it lives; copied now.
        let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
        #[cfg(unix)]
        let path = {
            use std::os::unix::ffi::OsStrExt;
            PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
        };
        #[cfg(not(unix))]
        let path = PathBuf::from(String::from_utf8_lossy(bytes).into_owned());
        Ok(path)
    }

    /// `n_samples` random windows of `seq_len + 1` bytes from a split: tokens and targets
    /// (the tokens shifted by one), each `[n_samples, seq_len]`. Sample `j` depends only on
    /// (seed, split, `batch_index`, `first_sample + j`), so data-parallel rank `r` asking for
    /// `first_sample = r * n_samples` gets its slice of the single-rank batch.
    ///
    /// [`Status::InvalidArgument`] when the split is shorter than `seq_len + 1` or a size is 0.
    pub fn batch(
        &self,
        split: Split,
        batch_index: u64,
        first_sample: u64,
        n_samples: usize,
        seq_len: usize,
    ) -> Result<TokenBatch> {
        let count = n_samples.checked_mul(seq_len).ok_or_else(|| {
            Error::new(
                Status::InvalidArgument,
                format!("n_samples * seq_len overflows: {} * {}", n_samples, seq_len),
            )
        })?;
        let mut batch = TokenBatch {
            tokens: vec![0; count],
            targets: vec![0; count],
            n_samples,
            seq_len,
        };
        self.batch_into(
            split,
            batch_index,
            first_sample,
            n_samples,
            seq_len,
            &mut batch.tokens,
            &mut batch.targets,
        )?;
        Ok(batch)
    }

    /// [`Dataset::batch`] into caller-provided buffers of `n_samples * seq_len` elements each
    /// (no allocation).
    #[allow(clippy::too_many_arguments)]
    pub fn batch_into(
        &self,
        split: Split,
        batch_index: u64,
        first_sample: u64,
        n_samples: usize,
        seq_len: usize,
        tokens: &mut [i32],
        targets: &mut [i32],
    ) -> Result<()> {
        if tokens.len() != targets.len() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "Dataset::batch_into: tokens has {} elements but targets has {}; both must \
                     hold n_samples * seq_len",
                    tokens.len(),
                    targets.len()
                ),
            ));
        }
        let (mut t0, mut t1) = (0i32, 0i32);
        let (tp, gp) = if tokens.is_empty() {
            (&mut t0 as *mut i32, &mut t1 as *mut i32)
        } else {
            (tokens.as_mut_ptr(), targets.as_mut_ptr())
        };
        // SAFETY: both buffers hold `tokens.len()` elements (or are one-element dummies for 0);
        // the library writes only when that count equals n_samples * seq_len.
        check(unsafe {
            sys::dst_dataset_batch(
                self.raw.as_ptr(),
                split.raw(),
                batch_index,
                first_sample,
                n_samples,
                seq_len,
                tp,
                gp,
                tokens.len(),
            )
        })
    }
}
