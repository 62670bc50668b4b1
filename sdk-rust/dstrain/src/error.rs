//! Status codes and the error type.
use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_char;

use dstrain_sys as sys;

/// The library's status codes (`dst_status_t`), one variant per code.
///
/// An [`Error`] never carries [`Status::Ok`]; the variant exists so that every
/// `dst_status_t` value has a counterpart. Codes added by a newer library arrive as
/// [`Status::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// `DST_OK`: success.
    Ok,
    /// `DST_ERR_INVALID_ARGUMENT`: NULL handle or buffer, wrong size, bad value.
    InvalidArgument,
    /// `DST_ERR_CONFIG`: ds_config or model spec is malformed or inconsistent.
    Config,
    /// `DST_ERR_NOT_SUPPORTED`: recognised but not built yet.
    NotSupported,
    /// `DST_ERR_IO`: a file could not be read or written.
    Io,
    /// `DST_ERR_CHECKPOINT`: checkpoint missing, corrupt or not matching the model.
    Checkpoint,
    /// `DST_ERR_STATE`: call in the wrong order.
    State,
    /// `DST_ERR_OUT_OF_MEMORY`: an allocation failed.
    OutOfMemory,
    /// `DST_ERR_COMM`: a collective failed or timed out.
    Comm,
    /// `DST_ERR_NUMERIC`: non-finite loss or gradients.
    Numeric,
    /// `DST_ERR_INTERNAL`: a bug in dstrain.
    Internal,
    /// `DST_ERR_ABORTED`: `dst_engine_abort` was called while the call ran; the engine
    /// can only be dropped now.
    Aborted,
    /// A code this crate does not know (from a newer library).
    Unknown(u32),
}

impl Status {
    /// The status for a raw `dst_status_t` value.
    pub fn from_code(code: sys::dst_status_t) -> Status {
        match code {
            sys::DST_OK => Status::Ok,
            sys::DST_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::DST_ERR_CONFIG => Status::Config,
            sys::DST_ERR_NOT_SUPPORTED => Status::NotSupported,
            sys::DST_ERR_IO => Status::Io,
            sys::DST_ERR_CHECKPOINT => Status::Checkpoint,
            sys::DST_ERR_STATE => Status::State,
            sys::DST_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::DST_ERR_COMM => Status::Comm,
            sys::DST_ERR_NUMERIC => Status::Numeric,
            sys::DST_ERR_INTERNAL => Status::Internal,
            sys::DST_ERR_ABORTED => Status::Aborted,
            other => Status::Unknown(other),
        }
    }

    /// The raw `dst_status_t` value.
    pub fn code(self) -> sys::dst_status_t {
        match self {
            Status::Ok => sys::DST_OK,
            Status::InvalidArgument => sys::DST_ERR_INVALID_ARGUMENT,
            Status::Config => sys::DST_ERR_CONFIG,
            Status::NotSupported => sys::DST_ERR_NOT_SUPPORTED,
            Status::Io => sys::DST_ERR_IO,
            Status::Checkpoint => sys::DST_ERR_CHECKPOINT,
            Status::State => sys::DST_ERR_STATE,
            Status::OutOfMemory => sys::DST_ERR_OUT_OF_MEMORY,
            Status::Comm => sys::DST_ERR_COMM,
            Status::Numeric => sys::DST_ERR_NUMERIC,
            Status::Internal => sys::DST_ERR_INTERNAL,
            Status::Aborted => sys::DST_ERR_ABORTED,
            Status::Unknown(code) => code,
        }
    }

    /// The library's short description (`dst_status_string`): "ok", "invalid argument", ...
    pub fn description(self) -> String {
        // SAFETY: dst_status_string accepts any value and returns a static string, never NULL
        // (checked anyway).
        unsafe { string_from_ptr(sys::dst_status_string(self.code())) }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description())
    }
}

/// A failed call: the status and the library's message (`dst_last_error`), which names what
/// failed and what to do about it.
///
/// Errors detected before calling the library (a string with an interior NUL byte, buffers
/// of different lengths where the C call takes one count) have status
/// [`Status::InvalidArgument`] and a message written by this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error with the given status and message.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }

    /// The status code (never [`Status::Ok`]).
    pub fn status(&self) -> Status {
        self.status
    }

    /// The library's message, e.g. `config: "optimizer.params.lrr": unknown key; did you
    /// mean "lr"?`.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "dstrain: {}", self.status)
        } else {
            write!(f, "dstrain: {}: {}", self.status, self.message)
        }
    }
}

impl std::error::Error for Error {}

/// The result type of every fallible call in this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a status into `Ok(())` or an [`Error`] with this thread's last error message.
///
/// Must be called on the thread that made the call, before any other library call: the
/// message is thread-local and is replaced by the next failure.
pub(crate) fn check(code: sys::dst_status_t) -> Result<()> {
    if code == sys::DST_OK {
        return Ok(());
    }
    // SAFETY: dst_last_error takes no arguments and returns a thread-local string that stays
    // valid until the next failing call on this thread; it is copied at once.
    let message = unsafe { string_from_ptr(sys::dst_last_error()) };
    Err(Error {
        status: Status::from_code(code),
        message,
    })
}

/// Copies a NUL-terminated C string (NULL gives "").
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that stays valid during the call.
pub(crate) unsafe fn string_from_ptr(ptr: *const c_char) -> String {
    if ptr.is_null() {
        String::new()
    } else {
        CStr::from_ptr(ptr).to_string_lossy().into_owned()
    }
}
