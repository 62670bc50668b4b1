//! `Engine: Send`: an engine created on one thread and used on another behaves exactly as on
//! its own thread (the header allows any thread, as long as calls do not overlap). Kept in
//! its own test binary because a violation can corrupt the heap and abort the process.
mod common;

use common::*;
use dstrain::Engine;

/// Attention with 8 heads and a 64-token context: per-thread scratch is large enough that a
/// thread count above the engine's own would write past it.
const MODEL: &str =
    r#"{"type":"gpt","vocab_size":256,"n_ctx":64,"n_layer":1,"n_head":8,"d_model":64,"seed":1}"#;

fn engine() -> Engine {
    Engine::builder()
        .config_json(adamw_config(4, 1)) // "dstrain": {"num_threads": 1}
        .model_json(MODEL)
        .build()
        .unwrap()
}

/// The "threads" figure of the metrics snapshot.
fn threads_in_metrics(engine: &mut Engine) -> String {
    let metrics = engine.metrics_json().unwrap();
    let at = metrics
        .find("\"threads\":")
        .expect("metrics name their threads");
    metrics[at..]
        .split(&[',', '}'][..])
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn engine_moved_to_another_thread_trains_identically() {
    let (tokens, targets) = pattern_batch(4, 64, 5);
    let mut here = engine();
    let expected: Vec<u32> = (0..3)
        .map(|_| {
            here.train_batch_tokens(&tokens, &targets, 4, 64)
                .unwrap()
                .to_bits()
        })
        .collect();
    let expected_threads = threads_in_metrics(&mut here);

    let mut moved = engine();
    let (t, g) = (tokens.clone(), targets.clone());
    let (mut moved, losses, threads) = std::thread::spawn(move || {
        let losses: Vec<u32> = (0..3)
            .map(|_| moved.train_batch_tokens(&t, &g, 4, 64).unwrap().to_bits())
            .collect();
        let threads = threads_in_metrics(&mut moved);
        (moved, losses, threads)
    })
    .join()
    .unwrap();
    assert_eq!(
        threads, expected_threads,
        "the engine must use its configured thread count on any thread"
    );
    assert_eq!(losses, expected, "losses differ on another thread");
    assert_eq!(moved.step_count().unwrap(), 3);

    // An error on another thread carries that thread's message.
    let err = std::thread::spawn(move || moved.train_batch_tokens(&tokens, &targets[..5], 4, 64))
        .join()
        .unwrap()
        .unwrap_err();
    assert!(err.message().contains("targets"), "{}", err);
}

#[test]
fn engines_with_different_thread_counts_on_one_thread() {
    let (tokens, targets) = pattern_batch(4, 64, 6);
    let mut alone = engine();
    let expected: Vec<u32> = (0..3)
        .map(|_| {
            alone
                .train_batch_tokens(&tokens, &targets, 4, 64)
                .unwrap()
                .to_bits()
        })
        .collect();

    // A second engine configured for 2 threads is created on the same thread afterwards.
    let mut one_thread = engine();
    let _two_threads = Engine::builder()
        .config_json(adamw_config(4, 1).replace("\"num_threads\":1", "\"num_threads\":2"))
        .model_json(MODEL)
        .build()
        .unwrap();
    let losses: Vec<u32> = (0..3)
        .map(|_| {
            one_thread
                .train_batch_tokens(&tokens, &targets, 4, 64)
                .unwrap()
                .to_bits()
        })
        .collect();
    assert_eq!(
        threads_in_metrics(&mut one_thread),
        threads_in_metrics(&mut alone),
        "an engine must keep its configured thread count when another engine is created"
    );
    assert_eq!(losses, expected);
}
