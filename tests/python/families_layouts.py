"""The layout checks the LLaMA and BLOOM layout tests share: every dp x tp x
pp x ZeRO layout, each pipeline schedule and sequence parallelism reproduce
the single-rank run (pipeline_support.py's harness: the losses of every
step and the untrained gradients within 1e-5 relative in fp32, and after
the steps and one more forward_backward every tensor's parameters and
gradients within 5e-5), and recomputation gives the stored run's bits.

Why 5e-5 after training: the untrained gradients of a tensor-parallel LLaMA
agree with the single rank within 1e-6 and every loss to the bit, but its
SwiGLU gate and up projections have elements whose gradient is zero but for
rounding; AdamW turns the order in which a split sums them into lr-sized
steps of either sign (measured: 1.7e-5 on up_proj after 4 steps at tp 2; GPT's
MLP stays under 1e-5)."""
import pipeline_support as ps

MICRO_BATCHES = 8
TRAINED_TOLERANCE = 5e-5

# 8 layers in all (embedding, 6 decoder layers, head); vocabulary 256 (the
# byte-level corpus).
LLAMA = {"type": "llama", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 48,
         "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "seed": 13}
# tp 4: 8 query heads over 4 key/value heads, the head tied.
LLAMA_TP4 = dict(LLAMA, num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=True,
                 seed=14)
BLOOM = {"type": "bloom", "vocab_size": 256, "hidden_size": 32, "n_layer": 6, "n_head": 4,
         "seq_length": 16, "seed": 15}


def check(tmp_path, build_dir, model, what, pp=1, dp=1, tp=1, **kw):
    ref = ps.reference(tmp_path, model, build_dir, MICRO_BATCHES,
                       **{k: v for k, v in kw.items() if k in ("precision", "recompute")})
    config = ps.make_config(pp=pp, dp=dp, tp=tp, accum=MICRO_BATCHES // dp, **kw)
    reports = ps.run_job(tmp_path, config, model, pp * dp * tp, "layout", build_dir=build_dir)
    assert {r["pp_rank"] for r in reports} == set(range(pp))
    assert {r["dp_rank"] for r in reports} == set(range(dp))
    assert {r["tp_rank"] for r in reports} == set(range(tp))
    ps.assert_equivalent(reports, ref, kw.get("precision", "fp32"), what, TRAINED_TOLERANCE)


def check_recomputation_is_bit_identical(tmp_path, build_dir, model, precision):
    """Full (every layer) and selective recomputation give the stored run's
    losses and tensors bit for bit."""
    stored = ps.run_job(tmp_path, ps.make_config(accum=2, precision=precision), model, 1,
                        "stored", build_dir=build_dir)[0]
    for recompute in (True, "selective"):
        again = ps.run_job(tmp_path, ps.make_config(accum=2, precision=precision,
                                                    recompute=recompute),
                           model, 1, f"recompute_{recompute}", build_dir=build_dir)[0]
        for key in ("losses", "fb_loss", "params", "grads"):
            assert again[key] == stored[key], (recompute, precision, key)
