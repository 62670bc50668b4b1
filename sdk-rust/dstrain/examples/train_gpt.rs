//! Train a small byte-level GPT on a text file, save a checkpoint halfway, and show that
//! resuming from it reproduces the uninterrupted run bit for bit. The C twin is
//! `examples/c/train_gpt.c`; both print the same lines.
//!
//! ```text
//! cargo run --offline --example train_gpt -- [--data FILE] [--steps N] [--ckpt DIR]
//! ```
//!
//! * `--data FILE`: text to train on (default: the default corpus, Debian's `fortunes`)
//! * `--steps N`: optimizer steps (default 200)
//! * `--ckpt DIR`: checkpoint directory (default `train_gpt_ckpt`)
use std::path::PathBuf;
use std::process::exit;

use dstrain::{Dataset, Engine, Split, TokenBatch};

const SEQ_LEN: usize = 64;
const VAL_BATCHES: u64 = 4;
const MODEL: &str = r#"{"type": "gpt", "vocab_size": 256, "n_ctx": 64, "n_layer": 2, "n_head": 4, "d_model": 64, "seed": 1}"#;

struct Args {
    data: Option<PathBuf>,
    steps: u64,
    ckpt: PathBuf,
}

fn usage() -> ! {
    eprintln!("usage: train_gpt [--data FILE] [--steps N] [--ckpt DIR]");
    exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        data: None,
        steps: 200,
        ckpt: PathBuf::from("train_gpt_ckpt"),
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let value = argv.get(i + 1).cloned().unwrap_or_else(|| usage());
        match argv[i].as_str() {
            "--data" => args.data = Some(PathBuf::from(value)),
            "--steps" => args.steps = value.parse().unwrap_or_else(|_| usage()),
            "--ckpt" => args.ckpt = PathBuf::from(value),
            _ => usage(),
        }
        i += 2;
    }
    if args.steps < 2 {
        eprintln!("train_gpt: --steps must be at least 2");
        exit(2);
    }
    args
}

fn main() {
    if let Err(e) = run(parse_args()) {
        eprintln!("train_gpt: {}", e);
        exit(1);
    }
}

fn create_engine(config: &str, steps: u64) -> dstrain::Result<Engine> {
    Engine::builder()
        .config_json(config)
        .model_json(MODEL)
        .total_steps(steps) // resolves "auto" in the LR schedule
        .build()
}

/// Mean loss over the first VAL_BATCHES batches of the validation split.
fn val_loss(engine: &mut Engine, data: &Dataset, n: usize) -> dstrain::Result<f64> {
    let mut sum = 0.0f64;
    for i in 0..VAL_BATCHES {
        let batch = data.batch(Split::Val, i, 0, n, SEQ_LEN)?;
        sum += f64::from(engine.eval_batch(&batch)?);
    }
    Ok(sum / VAL_BATCHES as f64)
}

/// Trains steps [from, to); batch `step` of the train split feeds step `step`.
fn train(
    engine: &mut Engine,
    data: &Dataset,
    batch: &mut TokenBatch,
    (from, to, total): (u64, u64, u64),
    verbose: bool,
) -> dstrain::Result<f32> {
    let every = if total >= 10 { total / 10 } else { 1 };
    let mut loss = 0.0f32;
    for step in from..to {
        let lr = engine.learning_rate()?;
        data.batch_into(
            Split::Train,
            step,
            0,
            batch.n_samples,
            SEQ_LEN,
            &mut batch.tokens,
            &mut batch.targets,
        )?;
        loss = engine.train_batch(&*batch)?;
        if verbose && ((step + 1) % every == 0 || step + 1 == to) {
            println!(
                "step {:4}/{}  loss {:.4}  lr {:.6}",
                step + 1,
                total,
                loss,
                lr
            );
        }
    }
    Ok(loss)
}

fn run(args: Args) -> dstrain::Result<()> {
    let data = match &args.data {
        Some(path) => Dataset::open_text(path, 0.1, 1234)?,
        None => Dataset::open_default(0.1, 1234)?,
    };
    println!(
        "data: {} ({} train / {} val tokens)",
        data.path()?.display(),
        data.num_tokens(Split::Train)?,
        data.num_tokens(Split::Val)?
    );

    let steps = args.steps;
    let config = format!(
        r#"{{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
            "optimizer": {{"type": "AdamW", "params": {{"lr": 3e-3, "betas": [0.9, 0.95],
                                                       "weight_decay": 0.1}}}},
            "scheduler": {{"type": "WarmupCosineLR",
                           "params": {{"total_num_steps": "auto", "warmup_num_steps": {}}}}},
            "gradient_clipping": 1.0}}"#,
        steps / 10
    );
    let mut engine = create_engine(&config, steps)?;
    let info = engine.info()?;
    println!(
        "model: GPT, {} parameters, {} samples x {} tokens per step",
        info.num_parameters, info.train_batch_size, SEQ_LEN
    );
    let n = info.samples_per_step();
    let mut batch = TokenBatch {
        tokens: vec![0; n * SEQ_LEN],
        targets: vec![0; n * SEQ_LEN],
        n_samples: n,
        seq_len: SEQ_LEN,
    };
    println!("val loss {:.4}", val_loss(&mut engine, &data, n)?);

    // First half, then a checkpoint recording where the data stream stands.
    let half = steps / 2;
    train(&mut engine, &data, &mut batch, (0, half, steps), true)?;
    let client_state = format!(r#"{{"next_batch": {}}}"#, half);
    engine.save_checkpoint(&args.ckpt, None, Some(&client_state))?;
    println!("saved checkpoint global_step{}", half);

    // Second half, uninterrupted.
    let final_loss = train(&mut engine, &data, &mut batch, (half, steps, steps), true)?;
    println!("val loss {:.4}", val_loss(&mut engine, &data, n)?);
    drop(engine);

    // A fresh engine resumes from the checkpoint and replays the second half.
    let mut resumed = create_engine(&config, steps)?;
    let saved_state = resumed.load_checkpoint(&args.ckpt, None)?;
    let start: Option<u64> = saved_state
        .split("\"next_batch\":")
        .nth(1)
        .and_then(|rest| {
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse().ok()
        });
    let step_count = resumed.step_count()?;
    println!(
        "resumed at step {} (client state {})",
        step_count, saved_state
    );
    if start != Some(step_count) {
        eprintln!(
            "train_gpt: client state says batch {:?}, engine says step {}",
            start, step_count
        );
        exit(1);
    }
    let resumed_loss = train(
        &mut resumed,
        &data,
        &mut batch,
        (step_count, steps, steps),
        false,
    )?;
    let same = resumed_loss.to_bits() == final_loss.to_bits();
    println!(
        "resumed run final loss {:.4}: {} the uninterrupted run",
        resumed_loss,
        if same {
            "bit-identical to"
        } else {
            "DIFFERENT from"
        }
    );
    if !same {
        exit(1);
    }
    Ok(())
}
