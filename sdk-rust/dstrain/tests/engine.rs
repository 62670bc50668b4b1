//! The safe Engine against the built library: training, errors, parameters, checkpoints,
//! determinism, metrics, threads.
mod common;

use common::*;
use dstrain::{Batch, Engine, LossType, ModelType, Source, Status};

fn tiny_engine(micro: usize, accum: usize) -> Engine {
    Engine::builder()
        .config_json(adamw_config(micro, accum))
        .model_json(TINY_GPT)
        .build()
        .unwrap_or_else(|e| panic!("engine: {}", e))
}

#[test]
fn gpt_training_lowers_the_loss() {
    let mut engine = tiny_engine(4, 2);
    let info = engine.info().unwrap();
    assert_eq!(info.model_type, ModelType::Gpt);
    assert_eq!(info.loss_type, LossType::CrossEntropy);
    assert_eq!(info.samples_per_step(), 8);
    assert_eq!((info.micro_batch_size, info.grad_accum_steps), (4, 2));
    assert_eq!(
        (info.seq_len, info.vocab_size, info.output_dim),
        (16, 256, 256)
    );
    assert_eq!((info.world_size, info.rank, info.dp_size), (1, 0, 1));

    let (held_tokens, held_targets) = pattern_batch(8, 16, 999);
    let before = engine
        .eval_batch_tokens(&held_tokens, &held_targets, 8, 16)
        .unwrap();
    let mut first = None;
    let mut last = 0.0;
    for step in 0..40 {
        let (tokens, targets) = pattern_batch(8, 16, step % 4);
        last = engine.train_batch_tokens(&tokens, &targets, 8, 16).unwrap();
        first.get_or_insert(last);
    }
    let after = engine
        .eval_batch_tokens(&held_tokens, &held_targets, 8, 16)
        .unwrap();
    assert!(
        before > 5.0 && before < 6.0,
        "initial loss {} is not ~ln(256)",
        before
    );
    assert!(after < before - 1.0, "eval loss {} -> {}", before, after);
    assert!(last < first.unwrap(), "train loss {:?} -> {}", first, last);
    assert_eq!(engine.step_count().unwrap(), 40);
    assert!(engine.learning_rate().unwrap() > 0.0);
}

fn regression_data(n: usize, offset: usize) -> (Vec<f32>, Vec<f32>) {
    // y = 0.5 x0 - x1 + 0.25 x2 + 2 x3, x from a fixed LCG in [-1, 1).
    let mut x = Vec::with_capacity(n * 4);
    let mut y = Vec::with_capacity(n);
    let mut s: u32 = 12345u32.wrapping_add(offset as u32 * 7919);
    for _ in 0..n {
        let mut row = [0.0f32; 4];
        for v in row.iter_mut() {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            *v = (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0;
        }
        x.extend_from_slice(&row);
        y.push(0.5 * row[0] - row[1] + 0.25 * row[2] + 2.0 * row[3]);
    }
    (x, y)
}

#[test]
fn sequential_regression_lowers_the_loss() {
    let model = r#"{"type":"sequential","input_dim":4,"loss":"mse","seed":3,
        "layers":[{"type":"linear","out_features":16},{"type":"relu"},
                  {"type":"linear","out_features":1,"bias":true}]}"#;
    let mut engine = Engine::builder()
        .config_json(adamw_config(16, 1))
        .model_json(model)
        .build()
        .unwrap();
    let info = engine.info().unwrap();
    assert_eq!(info.model_type, ModelType::Sequential);
    assert_eq!(info.loss_type, LossType::Mse);
    assert_eq!((info.input_dim, info.output_dim, info.seq_len), (4, 1, 0));

    let (hx, hy) = regression_data(16, 1000);
    let before = engine.eval_batch(Batch::regression(&hx, &hy, 16)).unwrap();
    for step in 0..150 {
        let (x, y) = regression_data(16, step);
        engine.train_batch_features(&x, &y, 16).unwrap();
    }
    let after = engine.eval_batch(Batch::regression(&hx, &hy, 16)).unwrap();
    assert!(after < 0.2 * before, "mse {} -> {}", before, after);
}

#[test]
fn sequential_classification_lowers_the_loss() {
    let model = r#"{"type":"sequential","input_dim":4,"loss":"cross_entropy","seed":4,
        "layers":[{"type":"linear","out_features":16},{"type":"gelu"},
                  {"type":"linear","out_features":3,"bias":true}]}"#;
    let mut engine = Engine::builder()
        .config_json(adamw_config(16, 1))
        .model_json(model)
        .build()
        .unwrap();
    assert_eq!(engine.info().unwrap().loss_type, LossType::CrossEntropy);
    // Class = which of x0, x1, x2 is largest.
    let classes = |x: &[f32]| -> Vec<i32> {
        x.chunks(4)
            .map(|r| {
                let mut best = 0;
                for k in 1..3 {
                    if r[k] > r[best] {
                        best = k;
                    }
                }
                best as i32
            })
            .collect()
    };
    let (hx, _) = regression_data(16, 1000);
    let hc = classes(&hx);
    let before = engine
        .eval_batch(Batch::classification(&hx, &hc, 16))
        .unwrap();
    for step in 0..150 {
        let (x, _) = regression_data(16, step);
        engine.train_batch_classes(&x, &classes(&x), 16).unwrap();
    }
    let after = engine
        .eval_batch(Batch::classification(&hx, &hc, 16))
        .unwrap();
    assert!(
        after < 0.5 * before,
        "cross-entropy {} -> {}",
        before,
        after
    );
}

#[test]
fn config_typo_is_an_error_naming_the_known_key() {
    let config = r#"{"train_micro_batch_size_per_gpu":2,
        "optimizer":{"type":"AdamW","params":{"lrr":0.001}}}"#;
    let err = Engine::builder()
        .config_json(config)
        .model_json(TINY_GPT)
        .build()
        .unwrap_err();
    assert_eq!(err.status(), Status::Config);
    assert!(err.message().contains("lrr"), "message: {}", err.message());
    assert!(
        err.message().contains("did you mean \"lr\""),
        "message: {}",
        err.message()
    );
    let shown = err.to_string();
    assert!(shown.starts_with("dstrain: "), "{}", shown);
    assert!(shown.contains(err.message()), "{}", shown);

    let top_level = r#"{"train_micro_batch_size_per_gpu":2,"gradient_acumulation_steps":1,
        "optimizer":{"type":"AdamW"}}"#;
    let err = Engine::new(Source::json(top_level), Source::json(TINY_GPT)).unwrap_err();
    assert_eq!(err.status(), Status::Config);
    assert!(
        err.message().contains("gradient_accumulation_steps"),
        "message: {}",
        err.message()
    );
}

#[test]
fn not_supported_feature_and_missing_inputs_are_errors() {
    let amsgrad = r#"{"train_micro_batch_size_per_gpu":2,
        "optimizer":{"type":"Adam","params":{"amsgrad":true}}}"#;
    let err = Engine::new(Source::json(amsgrad), Source::json(TINY_GPT)).unwrap_err();
    assert_eq!(err.status(), Status::NotSupported, "{}", err);
    assert!(!err.message().is_empty());

    let err = Engine::builder().model_json(TINY_GPT).build().unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(
        err.message().contains("config"),
        "message: {}",
        err.message()
    );

    let err = Engine::new(
        Source::path("/nonexistent/ds_config.json"),
        Source::json(TINY_GPT),
    )
    .unwrap_err();
    assert!(
        err.message().contains("/nonexistent/ds_config.json"),
        "{}",
        err
    );

    let err = Engine::new(Source::json("{\"a\":\0}"), Source::json(TINY_GPT)).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("NUL"), "{}", err);
}

#[test]
fn config_and_model_from_files() {
    let dir = TempDir::new("paths");
    let config = dir.path().join("ds_config.json");
    let model = dir.path().join("model.json");
    std::fs::write(&config, adamw_config(2, 1)).unwrap();
    std::fs::write(&model, TINY_GPT).unwrap();
    let engine = Engine::builder()
        .config_path(&config)
        .model_path(&model)
        .build()
        .unwrap();
    assert_eq!(engine.info().unwrap().micro_batch_size, 2);
}

#[test]
fn wrong_buffer_sizes_are_errors_with_the_library_message() {
    let mut engine = tiny_engine(2, 1);
    let (tokens, targets) = pattern_batch(2, 16, 1);

    // Too few targets for [2, 16].
    let err = engine
        .train_batch_tokens(&tokens, &targets[..31], 2, 16)
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(
        err.message().contains("targets"),
        "message: {}",
        err.message()
    );
    assert!(err.message().contains("31"), "message: {}", err.message());

    // n_samples must be micro-batch x accumulation for a training step.
    let (t4, g4) = pattern_batch(4, 16, 1);
    let err = engine.train_batch_tokens(&t4, &g4, 4, 16).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(!err.message().is_empty());

    // A feature batch for a GPT.
    let err = engine
        .train_batch(Batch::regression(&[0.0; 8], &[0.0; 2], 2))
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);

    // Sequence longer than n_ctx.
    let (t, g) = pattern_batch(2, 32, 1);
    let err = engine.train_batch_tokens(&t, &g, 2, 32).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);

    // None of the failures changed the engine.
    assert_eq!(engine.step_count().unwrap(), 0);
    engine.train_batch_tokens(&tokens, &targets, 2, 16).unwrap();
    assert_eq!(engine.step_count().unwrap(), 1);
}

#[test]
fn parameters_get_set_and_gradients() {
    let mut engine = tiny_engine(2, 1);
    let params = engine.parameters().unwrap();
    assert_eq!(params.len(), engine.param_count().unwrap());
    let wte = params
        .iter()
        .find(|p| p.name == "transformer.wte.weight")
        .expect("transformer.wte.weight is listed");
    assert_eq!(wte.shape, vec![256, 32]);
    assert_eq!(wte.numel, 256 * 32);
    let total: u64 = params.iter().map(|p| p.numel as u64).sum();
    assert_eq!(total, engine.info().unwrap().num_parameters);
    for p in &params {
        assert_eq!(p.shape.iter().product::<usize>(), p.numel, "{}", p.name);
    }

    // get / set round trip.
    let name = "transformer.h.0.attn.c_attn.weight";
    let original = engine.get_param(name).unwrap();
    let changed: Vec<f32> = original.iter().map(|v| v * 0.5 + 0.01).collect();
    engine.set_param(name, &changed).unwrap();
    assert_eq!(engine.get_param(name).unwrap(), changed);
    let mut out = vec![0.0f32; changed.len()];
    engine.get_param_into(name, &mut out).unwrap();
    assert_eq!(out, changed);

    // Wrong sizes and unknown names: the library's message.
    let err = engine.set_param(name, &changed[1..]).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let err = engine.get_param_into(name, &mut out[..3]).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let err = engine.get_param("transformer.no_such.weight").unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(
        err.message().contains("transformer.no_such.weight"),
        "message: {}",
        err.message()
    );

    // forward_backward leaves gradients and does not step.
    let (tokens, targets) = pattern_batch(2, 16, 3);
    let loss = engine
        .forward_backward(Batch::tokens(&tokens, &targets, 2, 16))
        .unwrap();
    assert!(loss.is_finite());
    assert_eq!(engine.step_count().unwrap(), 0);
    let grad = engine.get_grad(name).unwrap();
    assert_eq!(grad.len(), changed.len());
    assert!(grad.iter().any(|g| *g != 0.0));
    let mut grad2 = vec![0.0f32; grad.len()];
    engine.get_grad_into(name, &mut grad2).unwrap();
    assert_eq!(grad, grad2);
    assert_eq!(
        engine.get_param(name).unwrap(),
        changed,
        "no optimizer step"
    );
}

#[test]
fn checkpoint_round_trip_continues_bit_for_bit() {
    let dir = TempDir::new("ckpt");
    let batches: Vec<(Vec<i32>, Vec<i32>)> = (0..6).map(|i| pattern_batch(4, 16, i)).collect();

    let mut a = tiny_engine(2, 2);
    for (t, g) in &batches[..3] {
        a.train_batch_tokens(t, g, 4, 16).unwrap();
    }
    a.save_checkpoint(dir.path(), None, Some(r#"{"next_batch":3}"#))
        .unwrap();
    a.save_checkpoint(dir.path(), Some("tagged"), None).unwrap();
    assert!(dir.path().join("global_step3").is_dir());
    assert!(dir.path().join("latest").is_file());

    let mut b = Engine::builder()
        .config_json(adamw_config(2, 2))
        .model_json(gpt_with_seed(99)) // different init: the load must overwrite it
        .build()
        .unwrap();
    // `latest` names the last save ("tagged"), which has no client state.
    assert_eq!(b.load_checkpoint(dir.path(), None).unwrap(), "null");
    let client = b.load_checkpoint(dir.path(), Some("global_step3")).unwrap();
    assert_eq!(client, r#"{"next_batch":3}"#);
    assert_eq!(b.step_count().unwrap(), 3);
    assert_eq!(b.learning_rate().unwrap(), a.learning_rate().unwrap());
    for p in a.parameters().unwrap() {
        assert_eq!(
            a.get_param(&p.name).unwrap(),
            b.get_param(&p.name).unwrap(),
            "{}",
            p.name
        );
    }
    for (t, g) in &batches[3..] {
        let la = a.train_batch_tokens(t, g, 4, 16).unwrap();
        let lb = b.train_batch_tokens(t, g, 4, 16).unwrap();
        assert_eq!(la.to_bits(), lb.to_bits(), "resumed loss differs");
    }

    // Errors: client state that is not JSON, missing directory, unknown tag, other model.
    let err = b
        .save_checkpoint(dir.path(), Some("bad"), Some("{next_batch: 3"))
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{}", err);
    assert!(err.message().contains("client_state"), "{}", err);
    let err = b
        .load_checkpoint(dir.path().join("missing"), None)
        .unwrap_err();
    assert!(
        matches!(err.status(), Status::Checkpoint | Status::Io),
        "{}",
        err
    );
    assert!(!err.message().is_empty());
    let err = b
        .load_checkpoint(dir.path(), Some("no_such_tag"))
        .unwrap_err();
    assert!(err.message().contains("no_such_tag"), "{}", err);
    let mut other = Engine::builder()
        .config_json(adamw_config(2, 2))
        .model_json(
            r#"{"type":"gpt","vocab_size":256,"n_ctx":16,"n_layer":1,"n_head":2,"d_model":32}"#,
        )
        .build()
        .unwrap();
    let err = other.load_checkpoint(dir.path(), None).unwrap_err();
    assert_eq!(err.status(), Status::Checkpoint, "{}", err);
    assert_eq!(
        other.step_count().unwrap(),
        0,
        "a failed load changes nothing"
    );
}

fn losses_for_seed(seed: u64, steps: u32) -> Vec<u32> {
    let mut engine = Engine::builder()
        .config_json(adamw_config(2, 1))
        .model_json(gpt_with_seed(seed))
        .build()
        .unwrap();
    (0..steps)
        .map(|i| {
            let (t, g) = pattern_batch(2, 16, i);
            engine.train_batch_tokens(&t, &g, 2, 16).unwrap().to_bits()
        })
        .collect()
}

#[test]
fn same_seed_gives_the_same_losses() {
    let a = losses_for_seed(11, 5);
    let b = losses_for_seed(11, 5);
    let c = losses_for_seed(12, 5);
    assert_eq!(a, b, "same seed, different losses");
    assert_ne!(a, c, "different seeds, same losses");
}

#[test]
fn metrics_and_config_json() {
    let mut engine = Engine::builder()
        .config_json(
            r#"{"train_batch_size":"auto","train_micro_batch_size_per_gpu":2,
                "gradient_accumulation_steps":1,"optimizer":{"type":"AdamW"},
                "dstrain":{"num_threads":1}}"#,
        )
        .model_json(TINY_GPT)
        .build()
        .unwrap();
    let (t, g) = pattern_batch(2, 16, 1);
    engine.train_batch_tokens(&t, &g, 2, 16).unwrap();
    let metrics = engine.metrics_json().unwrap();
    assert!(
        metrics.starts_with('{') && metrics.ends_with('}'),
        "{}",
        metrics
    );
    for key in ["\"step\"", "\"loss\"", "\"tokens_per_sec\""] {
        assert!(metrics.contains(key), "{} missing from {}", key, metrics);
    }
    let memory = engine.memory_status_json().unwrap();
    for key in [
        "\"categories\"",
        "\"optimizer_state\"",
        "\"peak_rss_bytes\"",
        "\"available_bytes\"",
    ] {
        assert!(memory.contains(key), "{} missing from {}", key, memory);
    }
    let config = engine.config_json().unwrap();
    assert!(config.contains("\"train_batch_size\""), "{}", config);
    assert!(!config.contains("\"auto\""), "auto resolved: {}", config);
}

#[test]
fn estimate_memory_without_building_the_engine() {
    let json = Engine::builder()
        .config_json(adamw_config(2, 1))
        .model_json(TINY_GPT)
        .estimate_memory_json(4)
        .unwrap();
    assert!(json.contains("\"stages\""), "{}", json);
    assert!(json.contains("\"num_parameters\""), "{}", json);
    let err = Engine::builder()
        .config_json("{\"optimizer\": 3}")
        .model_json(TINY_GPT)
        .estimate_memory_json(4)
        .unwrap_err();
    assert_eq!(err.status(), Status::Config, "{}", err);
}

#[test]
fn status_codes_round_trip() {
    for code in 0..=12u32 {
        let status = Status::from_code(code);
        assert_eq!(status.code(), code);
        assert!(!status.description().is_empty());
    }
    assert_eq!(Status::from_code(0), Status::Ok);
    assert_eq!(Status::from_code(2), Status::Config);
    assert_eq!(Status::from_code(99), Status::Unknown(99));
    assert_eq!(Status::Config.to_string(), Status::Config.description());
    assert_eq!(dstrain::version(), dstrain::sys::DST_VERSION_STRING);
    assert!(dstrain::check_version().is_ok());
    assert!(dstrain::build_info_json().unwrap().contains("0.2.0"));
}

#[test]
fn io_probe_measures_a_directory_and_names_a_missing_one() {
    let dir = std::env::temp_dir().join(format!("dstrain_rust_probe_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dstrain::io_probe_json(&dir, 32 << 20).unwrap();
    assert!(report.contains("\"suggested_config\"") && report.contains("\"block_size\""));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0); // the probe's file is gone
    let err = dstrain::io_probe_json(&dir.join("nowhere"), 0).unwrap_err();
    assert_eq!(err.status(), Status::Io);
    assert!(err.message().contains("nowhere"), "{}", err);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn comm_bench_names_a_one_rank_group_and_a_bad_request() {
    // This test process is a one-rank job: nothing to measure, said by name.
    let err = dstrain::comm_bench_json(None, None).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("one rank"), "{}", err);
    let err = dstrain::comm_bench_json(None, Some(r#"{"ops": "all_reduce"}"#)).unwrap_err();
    assert!(err.message().contains("\"all_reduce\""), "{}", err);
}

#[test]
fn abort_frees_a_training_engine() {
    let mut engine = tiny_engine(2, 1);
    let (tokens, targets) = pattern_batch(2, 16, 1);
    engine.train_batch_tokens(&tokens, &targets, 2, 16).unwrap();
    engine.abort(); // consumes the engine: it cannot be used or dropped afterwards
    tiny_engine(2, 1).abort(); // before any step
}

#[test]
fn an_abort_handle_stops_the_running_call_from_another_thread() {
    let mut engine = tiny_engine(2, 8);
    let abort = engine.abort_handle();
    let (tokens, targets) = pattern_batch(16, 16, 1);
    let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&started);
    let watchdog = std::thread::spawn(move || {
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        abort.abort();
        abort.abort(); // a second abort does nothing
    });
    let mut outcome = Ok(0.0);
    for _ in 0..100_000 {
        started.store(true, std::sync::atomic::Ordering::SeqCst);
        outcome = engine.train_batch_tokens(&tokens, &targets, 16, 16);
        if outcome.is_err() {
            break;
        }
    }
    watchdog.join().unwrap();
    let err = outcome.unwrap_err();
    assert_eq!(err.status(), Status::Aborted, "{}", err);
    assert!(err.message().contains("dst_engine_abort"), "{}", err);
    // Every later call is refused by name; dropping the engine frees nothing twice.
    assert_eq!(engine.step_count().unwrap_err().status(), Status::Aborted);
    drop(engine);
}
