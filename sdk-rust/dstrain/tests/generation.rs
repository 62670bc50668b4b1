//! Generator and Tokenizer against the built library: the seed decides the tokens, the
//! cache changes none of them, the callback streams and stops, logits and loss agree, errors
//! carry the library's message.
mod common;

use common::*;
use dstrain::{Generator, GeneratorOptions, Sampling, Status, Tokenizer};

const MODEL: &str = r#"{"type":"llama","vocab_size":64,"hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":32,"initializer_range":0.5,"seed":11}"#;

fn open() -> Generator {
    let options = GeneratorOptions {
        threads: 1,
        ..Default::default()
    };
    Generator::from_model_json(MODEL, &options).unwrap()
}

#[test]
fn the_seed_decides_and_the_cache_changes_nothing() {
    let mut g = open();
    assert_eq!((g.vocab_size(), g.context()), (64, 32));
    let sampled = Sampling {
        max_new_tokens: 10,
        temperature: 0.9,
        top_k: 20,
        seed: 3,
        stop_at_eos: false,
        ..Default::default()
    };
    let a = g.generate(&[1, 2, 3], &sampled, |_| true).unwrap();
    let b = g
        .generate(
            &[1, 2, 3],
            &Sampling {
                use_cache: false,
                ..sampled
            },
            |_| true,
        )
        .unwrap();
    assert_eq!(a, b);
    assert_eq!((a.tokens.len(), a.stop_reason.as_str()), (10, "length"));
    let mut seen = Vec::new();
    let stopped = g
        .generate(&[1, 2, 3], &sampled, |t| {
            seen.push(t);
            seen.len() < 4
        })
        .unwrap();
    assert_eq!(stopped.stop_reason, "caller");
    assert_eq!(stopped.tokens, seen);
    assert_eq!(seen, a.tokens[..4].to_vec());
    // greedy: the argmax of the last position's logits
    let greedy = Sampling {
        max_new_tokens: 1,
        temperature: 0.0,
        ..sampled
    };
    let first = g.generate(&[5, 6, 7], &greedy, |_| true).unwrap().tokens[0];
    let logits = g.logits(&[5, 6, 7], 1, 3).unwrap();
    let last = &logits[2 * 64..3 * 64];
    let argmax = (0..64).fold(0, |best, i| if last[i] > last[best] { i } else { best });
    assert_eq!(first as usize, argmax);
    let loss = g.loss(&[5, 6, 7], &[6, 7, -1], 1, 3).unwrap();
    assert!(loss.is_finite() && loss > 0.0);
}

#[test]
fn errors_carry_the_library_message() {
    let mut g = open();
    let err = g
        .generate(&[1, 64], &Sampling::default(), |_| true)
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(
        err.message().contains("outside the model's vocabulary"),
        "{}",
        err
    );
    let err = Tokenizer::open("/nonexistent/tokenizer.model").unwrap_err();
    assert_eq!(err.status(), Status::Io);
    assert!(err.message().contains("does not exist"), "{}", err);
    let _ = TempDir::new("generation");
}
