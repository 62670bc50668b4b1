//! Safe Rust bindings to `libdstrain`, a DeepSpeed-class training engine behind a stable C ABI.
//!
//! All training logic lives in the library; this crate turns its handles into owned types
//! that free themselves on drop, its status codes into [`Result`] with the library's message,
//! and Rust slices into its batch buffers (no copies). It uses no external crates.
//!
//! * [`Engine`] — a model, its optimizer and configuration (a DeepSpeed `ds_config.json`):
//!   train, evaluate, read and write parameters and gradients, checkpoints, metrics.
//! * [`Dataset`] — a text file as byte-level tokens with the library's deterministic sampler.
//! * [`Error`] — a [`Status`] mirroring `dst_status_t` and the library's message, read from
//!   `dst_last_error()` on the calling thread right after the failing call.
//!
//! # Example
//!
//! Train a small GPT on the default corpus (Debian's `fortunes`) and save a checkpoint (this
//! is `examples/readme.rs`, run by the test suite):
//!
#![doc = concat!("```no_run\n", include_str!("../examples/readme.rs"), "```")]
//!
//! # Threads and panics
//!
//! [`Engine`] and [`Dataset`] are [`Send`] but not [`Sync`]: the C header forbids concurrent
//! calls on one handle, so a handle may move between threads but never be shared. Different
//! handles may be used on different threads; they share the process-wide BLAS/OpenMP pool.
//! The library makes no callbacks into Rust, so no panic can cross the FFI boundary, and it
//! catches its own C++ exceptions before they reach Rust.
//!
//! # Linking
//!
//! `dstrain-sys` links `libdstrain.so` from `$DSTRAIN_LIB_DIR` (default: the repository's
//! `build/` directory). This crate's tests and examples get an rpath to it; a program that
//! depends on this crate needs the library installed, an rpath, or `LD_LIBRARY_PATH`.
#![warn(missing_docs)]

mod batch;
mod dataset;
mod engine;
mod error;
mod generator;
mod tokenizer;
mod util;

pub use batch::{Batch, TokenBatch};
pub use dataset::{Dataset, Split};
pub use engine::{AbortHandle, Engine, EngineBuilder, Info, LossType, ModelType, ParamInfo, Source};
pub use error::{Error, Result, Status};
pub use generator::{Generated, Generator, GeneratorOptions, Sampling};
pub use tokenizer::Tokenizer;

/// The raw FFI declarations this crate is built on.
pub use dstrain_sys as sys;

/// The loaded library's version string, e.g. `"0.2.0"` (`dst_version`).
pub fn version() -> String {
    // SAFETY: dst_version takes no arguments and returns a static string.
    unsafe { error::string_from_ptr(sys::dst_version()) }
}

/// The loaded library's version number, `major * 10000 + minor * 100 + patch`.
pub fn version_number() -> i32 {
    // SAFETY: no arguments, no pointers.
    unsafe { sys::dst_version_number() }
}

/// Checks that the loaded library can serve this crate: the same major version and at least
/// the version of the header the crate mirrors. [`Engine`] and [`Dataset`] constructors call
/// it; [`Status::NotSupported`] otherwise.
pub fn check_version() -> Result<()> {
    let loaded = version_number();
    let expected = sys::DST_VERSION_NUMBER;
    if loaded / 10000 == expected / 10000 && loaded >= expected {
        Ok(())
    } else {
        Err(Error::new(
            Status::NotSupported,
            format!(
                "libdstrain {} is loaded but this crate was written for {} (same major version, \
                 at least this minor); point DSTRAIN_LIB_DIR / LD_LIBRARY_PATH at a matching \
                 library",
                version(),
                sys::DST_VERSION_STRING
            ),
        ))
    }
}

/// Sequential write and read bandwidth of the file system under `dir` through the NVMe
/// offload tier's own I/O path, per aio block size and queue depth, with the best and the
/// `aio` settings to use, as JSON (`file_bytes` 0: 128 MiB per setting).
pub fn io_probe_json(dir: &std::path::Path, file_bytes: u64) -> Result<String> {
    check_version()?;
    let dir_c = util::path_cstring(dir, "io_probe dir")?;
    let file_bytes = i64::try_from(file_bytes).map_err(|_| {
        Error::new(
            Status::InvalidArgument,
            format!("file_bytes {} is larger than i64::MAX", file_bytes),
        )
    })?;
    let mut json: *const std::os::raw::c_char = std::ptr::null();
    // SAFETY: `dir_c` lives during the call; `json` is a valid out pointer.
    error::check(unsafe { sys::dst_io_probe_json(dir_c.as_ptr(), file_bytes, &mut json) })?;
    // SAFETY: thread-local, valid until the next call on this thread; copied now.
    Ok(unsafe { error::string_from_ptr(json) })
}

/// The bandwidth of the job's collectives by nccl-tests' definitions (algbw, busbw per op and
/// message size), as JSON; call it on every rank of a launch. `config_json` (None: one dp
/// group of all ranks) gives the layout; `request_json` (None: defaults) is
/// `{"group", "ops", "min_bytes", "max_bytes", "factor", "iters", "warmup"}`.
pub fn comm_bench_json(config_json: Option<&str>, request_json: Option<&str>) -> Result<String> {
    check_version()?;
    let config = config_json
        .map(|c| util::cstring(c, "comm_bench config_json"))
        .transpose()?;
    let request = request_json
        .map(|r| util::cstring(r, "comm_bench request_json"))
        .transpose()?;
    let ptr = |c: &Option<std::ffi::CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    let mut json: *const std::os::raw::c_char = std::ptr::null();
    // SAFETY: the strings live during the call; `json` is a valid out pointer.
    error::check(unsafe { sys::dst_comm_bench_json(ptr(&config), ptr(&request), &mut json) })?;
    // SAFETY: thread-local, valid until the next call on this thread; copied now.
    Ok(unsafe { error::string_from_ptr(json) })
}

/// A JSON object describing the library's build: version, compiler, build type, BLAS and its
/// threads, CPU features, whether CUDA / NCCL are compiled in, devices seen.
pub fn build_info_json() -> Result<String> {
    let mut json: *const std::os::raw::c_char = std::ptr::null();
    // SAFETY: valid out pointer; the string is static.
    error::check(unsafe { sys::dst_build_info_json(&mut json) })?;
    // SAFETY: static storage, valid for the life of the process.
    Ok(unsafe { error::string_from_ptr(json) })
}
