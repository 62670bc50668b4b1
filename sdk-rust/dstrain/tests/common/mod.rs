//! Shared helpers for the integration tests: tiny models, configs, batches, temp dirs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A 2-layer GPT small enough to train in milliseconds.
pub const TINY_GPT: &str =
    r#"{"type":"gpt","vocab_size":256,"n_ctx":16,"n_layer":2,"n_head":2,"d_model":32,"seed":7}"#;

/// AdamW, micro-batch `micro`, accumulation `accum`, one thread (bit-reproducible).
pub fn adamw_config(micro: usize, accum: usize) -> String {
    format!(
        r#"{{"train_micro_batch_size_per_gpu":{},"gradient_accumulation_steps":{},
            "optimizer":{{"type":"AdamW","params":{{"lr":0.003,"weight_decay":0.1}}}},
            "gradient_clipping":1.0,"dstrain":{{"num_threads":1}}}}"#,
        micro, accum
    )
}

/// A GPT with a given seed.
pub fn gpt_with_seed(seed: u64) -> String {
    format!(
        r#"{{"type":"gpt","vocab_size":256,"n_ctx":16,"n_layer":2,"n_head":2,"d_model":32,"seed":{}}}"#,
        seed
    )
}

/// A learnable GPT batch: arithmetic sequences of stride 3 (tokens, targets), `[n, t]`.
pub fn pattern_batch(n: usize, t: usize, seed: u32) -> (Vec<i32>, Vec<i32>) {
    let mut tokens = Vec::with_capacity(n * t);
    let mut targets = Vec::with_capacity(n * t);
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
    for _ in 0..n {
        x = x.wrapping_mul(1664525).wrapping_add(1013904223);
        let start = ((x >> 8) % 200) as i32;
        for j in 0..t as i32 {
            tokens.push((start + j * 3) % 256);
            targets.push((start + (j + 1) * 3) % 256);
        }
    }
    (tokens, targets)
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "dstrain-rs-{}-{}-{}",
            name,
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
