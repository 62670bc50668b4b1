//! Dataset against the built library: splits, deterministic sampling, data-parallel slices,
//! errors, and training a GPT from it.
mod common;

use common::*;
use dstrain::{Dataset, Engine, Split, Status};

/// A text file of `len` bytes with some structure.
fn write_corpus(dir: &TempDir, len: usize) -> std::path::PathBuf {
    let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog. "
        .iter()
        .cycle()
        .take(len)
        .copied()
        .collect();
    let path = dir.path().join("corpus.txt");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn splits_batches_and_slices() {
    let dir = TempDir::new("dataset");
    let path = write_corpus(&dir, 10_000);
    let data = Dataset::open_text(&path, 0.1, 7).unwrap();
    let train = data.num_tokens(Split::Train).unwrap();
    let val = data.num_tokens(Split::Val).unwrap();
    assert_eq!(train + val, 10_000);
    assert_eq!(val, 1_000);
    assert_eq!(data.path().unwrap(), path);

    let batch = data.batch(Split::Train, 3, 0, 4, 16).unwrap();
    assert_eq!((batch.n_samples, batch.seq_len), (4, 16));
    assert_eq!(batch.tokens.len(), 64);
    assert!(batch.tokens.iter().all(|&t| (0..256).contains(&t)));
    for s in 0..4 {
        let row = &batch.tokens[s * 16..(s + 1) * 16];
        let next = &batch.targets[s * 16..(s + 1) * 16];
        assert_eq!(&row[1..], &next[..15], "targets are tokens shifted by one");
    }
    // Deterministic: same arguments, same batch; another index, another batch.
    assert_eq!(batch, data.batch(Split::Train, 3, 0, 4, 16).unwrap());
    assert_ne!(batch, data.batch(Split::Train, 4, 0, 4, 16).unwrap());
    // Rank 1 of 2 asking for first_sample 2 gets samples 2..4 of the full batch.
    let slice = data.batch(Split::Train, 3, 2, 2, 16).unwrap();
    assert_eq!(slice.tokens[..], batch.tokens[32..]);
    // Into caller buffers.
    let (mut t, mut g) = (vec![0; 64], vec![0; 64]);
    data.batch_into(Split::Train, 3, 0, 4, 16, &mut t, &mut g)
        .unwrap();
    assert_eq!((t, g), (batch.tokens.clone(), batch.targets.clone()));
    // Validation split differs.
    assert_ne!(batch, data.batch(Split::Val, 3, 0, 4, 16).unwrap());
}

#[test]
fn dataset_errors_carry_the_library_message() {
    let err = Dataset::open_text("/nonexistent/corpus.txt", 0.1, 1).unwrap_err();
    assert_eq!(err.status(), Status::Io, "{}", err);
    assert!(err.message().contains("/nonexistent/corpus.txt"), "{}", err);

    let dir = TempDir::new("dataset-err");
    let data = Dataset::open_text(write_corpus(&dir, 1000), 0.1, 1).unwrap();
    // The validation split (100 bytes) is shorter than seq_len + 1.
    let err = data.batch(Split::Val, 0, 0, 1, 200).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("dst_dataset_batch"), "{}", err);
    let err = data.batch(Split::Train, 0, 0, 0, 16).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    // Wrong buffer size.
    let (mut t, mut g) = (vec![0; 10], vec![0; 10]);
    let err = data
        .batch_into(Split::Train, 0, 0, 2, 16, &mut t, &mut g)
        .unwrap_err();
    assert!(err.message().contains("count is 10"), "{}", err);
    let mut short = vec![0; 9];
    let err = data
        .batch_into(Split::Train, 0, 0, 2, 5, &mut t, &mut short)
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
}

#[test]
fn gpt_trains_on_a_text_file() {
    let dir = TempDir::new("dataset-train");
    let data = Dataset::open_text(write_corpus(&dir, 20_000), 0.1, 3).unwrap();
    let mut engine = Engine::builder()
        .config_json(adamw_config(4, 1))
        .model_json(TINY_GPT)
        .build()
        .unwrap();
    let n = engine.info().unwrap().samples_per_step();
    let val = data.batch(Split::Val, 0, 0, n, 16).unwrap();
    let before = engine.eval_batch(&val).unwrap();
    for step in 0..40 {
        let batch = data.batch(Split::Train, step, 0, n, 16).unwrap();
        engine.train_batch(&batch).unwrap();
    }
    let after = engine.eval_batch(&val).unwrap();
    assert!(after < 0.6 * before, "val loss {} -> {}", before, after);
}

#[test]
fn dataset_moves_between_threads() {
    let dir = TempDir::new("dataset-send");
    let data = Dataset::open_text(write_corpus(&dir, 1000), 0.1, 1).unwrap();
    let here = data.batch(Split::Train, 1, 0, 2, 8).unwrap();
    let there = std::thread::spawn(move || data.batch(Split::Train, 1, 0, 2, 8).unwrap())
        .join()
        .unwrap();
    assert_eq!(here, there);
}

#[test]
fn token_files_open_and_bad_ones_are_named() {
    let dir = TempDir::new("tokens");
    let tokens: Vec<u16> = (0..4000u32).map(|i| (i * 7919 % 1000) as u16).collect();
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    let raw = dir.path().join("train.bin");
    std::fs::write(&raw, &bytes).unwrap();
    let data = Dataset::open_tokens(&raw, 0.1, 3).unwrap();
    assert_eq!(data.max_token().unwrap(), 999);
    let total = data.num_tokens(Split::Train).unwrap() + data.num_tokens(Split::Val).unwrap();
    assert_eq!(total, 4000);
    let odd = dir.path().join("odd.bin");
    std::fs::write(&odd, &bytes[..bytes.len() - 1]).unwrap();
    let err = Dataset::open_tokens(&odd, 0.1, 3).unwrap_err();
    assert_eq!(err.status(), Status::Io);
    assert!(err.message().contains("odd size"), "{}", err);
}
