//! String conversions for the C calls.
use std::ffi::CString;
use std::path::Path;

use crate::error::{Error, Result, Status};

/// `text` as a C string; an interior NUL byte is an InvalidArgument error naming `what`.
pub(crate) fn cstring(text: &str, what: &str) -> Result<CString> {
    CString::new(text).map_err(|e| {
        Error::new(
            Status::InvalidArgument,
            format!(
                "{} contains a NUL byte at offset {}",
                what,
                e.nul_position()
            ),
        )
    })
}

/// `path` as a C string (its bytes on Unix, UTF-8 elsewhere).
pub(crate) fn path_cstring(path: &Path, what: &str) -> Result<CString> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = match path.to_str() {
        Some(s) => s.as_bytes().to_vec(),
        None => {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("{} {:?} is not valid UTF-8", what, path),
            ))
        }
    };
    CString::new(bytes).map_err(|_| {
        Error::new(
            Status::InvalidArgument,
            format!("{} {:?} contains a NUL byte", what, path),
        )
    })
}
