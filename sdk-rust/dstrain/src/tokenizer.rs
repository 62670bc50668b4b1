//! Tokenizers (`dst_tokenizer_*`): SentencePiece models and byte-level BPE.
use std::os::raw::c_char;
use std::path::Path;
use std::ptr::{self, NonNull};

use dstrain_sys as sys;

use crate::error::{check, string_from_ptr, Error, Result, Status};
use crate::util::path_cstring;

/// A tokenizer file: a SentencePiece `tokenizer.model`, a Hugging Face `tokenizer.json`
/// (byte-level BPE), GPT-2's `vocab.json` (beside `merges.txt`), or a directory holding one.
/// `Send` and `Sync`: calls may run from several threads at once. Destroyed on drop.
#[derive(Debug)]
pub struct Tokenizer {
    raw: NonNull<sys::dst_tokenizer_t>,
    info: String,
}

// SAFETY: the library allows concurrent calls on one tokenizer (its state is read-only and
// its results thread-local).
unsafe impl Send for Tokenizer {}
unsafe impl Sync for Tokenizer {}

impl Drop for Tokenizer {
    fn drop(&mut self) {
        // SAFETY: `raw` came from dst_tokenizer_open and is destroyed exactly once.
        unsafe { sys::dst_tokenizer_destroy(self.raw.as_ptr()) }
    }
}

impl Tokenizer {
    /// Opens a tokenizer file or directory; unsupported components are
    /// [`Status::NotSupported`] naming them.
    pub fn open(path: impl AsRef<Path>) -> Result<Tokenizer> {
        crate::check_version()?;
        let path = path_cstring(path.as_ref(), "tokenizer path")?;
        let mut raw: *mut sys::dst_tokenizer_t = ptr::null_mut();
        // SAFETY: `path` outlives the call.
        check(unsafe { sys::dst_tokenizer_open(&mut raw, path.as_ptr()) })?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::new(
                Status::Internal,
                "dst_tokenizer_open returned NULL".to_string(),
            )
        })?;
        let mut json: *const c_char = ptr::null();
        // SAFETY: `raw` is live; the string is owned by it and copied at once.
        check(unsafe { sys::dst_tokenizer_info_json(raw.as_ptr(), &mut json) })?;
        let info = unsafe { string_from_ptr(json) };
        Ok(Tokenizer { raw, info })
    }

    /// `{"kind", "vocab_size", "bos_id", "eos_id"}` as JSON text.
    pub fn info_json(&self) -> &str {
        &self.info
    }

    /// The ids of `text`; `add_special`: the tokenizer's additions (a SentencePiece BOS, a
    /// tokenizer.json's template).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<i32>> {
        let mut ids: *const i32 = ptr::null();
        let mut n = 0usize;
        // SAFETY: the text's bytes outlive the call; the ids are thread-local and copied at
        // once, before any other call on this thread.
        check(unsafe {
            sys::dst_tokenizer_encode(
                self.raw.as_ptr(),
                text.as_ptr() as *const c_char,
                text.len(),
                add_special as i32,
                &mut ids,
                &mut n,
            )
        })?;
        if n == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the library returned n ids at `ids`.
        Ok(unsafe { std::slice::from_raw_parts(ids, n) }.to_vec())
    }

    /// The text of `ids` (invalid UTF-8, such as an incomplete character, replaced).
    pub fn decode(&self, ids: &[i32]) -> Result<String> {
        let mut text: *const c_char = ptr::null();
        let mut len = 0usize;
        // SAFETY: `ids` outlives the call; the text is thread-local and copied at once.
        check(unsafe {
            sys::dst_tokenizer_decode(
                self.raw.as_ptr(),
                ids.as_ptr(),
                ids.len(),
                &mut text,
                &mut len,
            )
        })?;
        // SAFETY: the library returned `len` bytes at `text`.
        let bytes = unsafe { std::slice::from_raw_parts(text as *const u8, len) };
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}
