//! The determinism recipe shared by the C, Rust and Python examples: five AdamW steps of a
//! tiny GPT on the default corpus, one thread, printing each loss as its IEEE-754 bit pattern
//! (`step K loss_bits 0xXXXXXXXX`, K = 0..4; batch K of the train split feeds step K).
//!
//! Its C twin is `examples/c/same_seed.c`; the test suite checks both print the same lines.
//!
//! ```text
//! cargo run --offline --example same_seed
//! ```
use dstrain::{Dataset, Engine, Split};

const MODEL: &str =
    r#"{"type":"gpt","vocab_size":256,"n_ctx":16,"n_layer":1,"n_head":2,"d_model":16,"seed":5}"#;
const CONFIG: &str = r#"{"train_micro_batch_size_per_gpu":2,"gradient_accumulation_steps":1,"optimizer":{"type":"AdamW","params":{"lr":1e-3}},"dstrain":{"num_threads":1}}"#;

fn main() {
    if let Err(e) = run() {
        eprintln!("same_seed: {}", e);
        std::process::exit(1);
    }
}

fn run() -> dstrain::Result<()> {
    let mut engine = Engine::builder()
        .config_json(CONFIG)
        .model_json(MODEL)
        .build()?;
    let data = Dataset::open_default(0.1, 7)?;
    for step in 0..5u64 {
        let batch = data.batch(Split::Train, step, 0, 2, 16)?;
        let loss = engine.train_batch(&batch)?;
        println!("step {} loss_bits {:#010x}", step, loss.to_bits());
    }
    Ok(())
}
