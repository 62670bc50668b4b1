use dstrain::{Dataset, Engine, Split};

fn main() -> Result<(), dstrain::Error> {
    let config = r#"{"train_micro_batch_size_per_gpu": 8,
                     "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}}"#;
    let model = r#"{"type": "gpt", "vocab_size": 256, "n_ctx": 64,
                    "n_layer": 2, "n_head": 4, "d_model": 64}"#;
    let mut engine = Engine::builder()
        .config_json(config)
        .model_json(model)
        .build()?;
    let data = Dataset::open_default(0.1, 1)?; // or Dataset::open_text("my.txt", 0.1, 1)
    let n = engine.info()?.samples_per_step(); // micro-batch x gradient accumulation
    for step in 0..20 {
        let batch = data.batch(Split::Train, step, 0, n, 64)?;
        let loss = engine.train_batch(&batch)?;
        println!("step {step} loss {loss:.4}");
    }
    engine.save_checkpoint("ckpt", None, Some(r#"{"next_batch": 20}"#))?; // ckpt/global_step20/
    Ok(())
}
