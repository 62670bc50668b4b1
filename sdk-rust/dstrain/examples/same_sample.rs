//! Generation's determinism recipe shared by the C, Rust and Python SDKs: a tiny LLaMA-style
//! model (its seeded weights) continues the prompt 1, 2, 3 with 16 tokens sampled at
//! temperature 0.8, top-k 20, top-p 0.9, seed 42, then 8 greedy tokens, one thread, printing
//! `sample K id N` and `greedy K id N` lines.
//!
//! Its C twin is `examples/c/same_sample.c`; the test suite checks both print the same lines.
//!
//! ```text
//! cargo run --offline --example same_sample
//! ```
use dstrain::{Generator, GeneratorOptions, Sampling};

const MODEL: &str = r#"{"type":"llama","vocab_size":64,"hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":64,"initializer_range":0.5,"seed":11}"#;

fn main() {
    if let Err(e) = run() {
        eprintln!("same_sample: {}", e);
        std::process::exit(1);
    }
}

fn run() -> dstrain::Result<()> {
    let options = GeneratorOptions {
        threads: 1,
        ..Default::default()
    };
    let mut g = Generator::from_model_json(MODEL, &options)?;
    let sampled = Sampling {
        max_new_tokens: 16,
        temperature: 0.8,
        top_k: 20,
        top_p: 0.9,
        seed: 42,
        ..Default::default()
    };
    for (k, id) in g
        .generate(&[1, 2, 3], &sampled, |_| true)?
        .tokens
        .iter()
        .enumerate()
    {
        println!("sample {} id {}", k, id);
    }
    let greedy = Sampling {
        max_new_tokens: 8,
        temperature: 0.0,
        ..sampled
    };
    for (k, id) in g
        .generate(&[1, 2, 3], &greedy, |_| true)?
        .tokens
        .iter()
        .enumerate()
    {
        println!("greedy {} id {}", k, id);
    }
    Ok(())
}
