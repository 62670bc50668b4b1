"""Parity of dstrain's LLaMA and BLOOM families with PyTorch implementations
written from transformers' LlamaForCausalLM and BloomForCausalLM
(torch_families.py: rotate_half rotary, repeat_kv, RMSNorm in fp32, BLOOM's
ALiBi slopes and head-interleaved fused query_key_value).

tests/tools/dst_parity_tool (C ABI only) dumps the engine's initial weights
(perturbed, so that unit norm weights and zero biases hide nothing), the
gradients of batch 0 and the losses of 10 AdamW steps; PyTorch loads the
weights by name and must reproduce the loss and every gradient within 1e-4
(norm-relative) and the 10 losses within 1e-4. Under bf16 the engine is
compared with PyTorch's bf16 autocast within the bounds test_parity_bf16.py
documents. The first tests check the torch twins themselves (names,
gradcheck, causality).
"""
import math

import pytest
import torch

import torch_families
from test_parity import EngineRun, adamw, ds_config, norm_rel, rel, run_tool, torch_optimizer

STEPS = 10
LOSS_RTOL = 1e-4
GRAD_RTOL = 1e-4
TRAIN_RTOL = 1e-4
UPDATE_RTOL = 5e-3

LLAMA_GQA = {
    "type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "seq_length": 16, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "seed": 3,
}
# Multi-query, tied, biases, Llama 3.1's rotary scaling engaged at this head
# size (wavelengths 6, 63, 628 and 6283 against 16 and 64: one frequency
# kept, one blended, two interpolated).
LLAMA_MQA = dict(
    LLAMA_GQA, num_key_value_heads=1, tie_word_embeddings=True, attention_bias=True,
    mlp_bias=True, seed=4,
    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
)
# A Mistral config.json as Hugging Face writes it (no "type"; bookkeeping
# keys; a sliding window no shorter than the sequences), linear rotary scaling.
MISTRAL = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0", "bos_token_id": 1, "eos_token_id": 2, "use_cache": True,
    "hidden_act": "silu", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 16, "sliding_window": 16, "rms_norm_eps": 1e-5,
    "rope_theta": 1000.0, "rope_scaling": {"type": "linear", "factor": 2.0},
    "tie_word_embeddings": False, "attention_dropout": 0.0, "seed": 6,
}
BLOOM = {"type": "bloom", "vocab_size": 96, "hidden_size": 32, "n_layer": 2, "n_head": 4,
         "seq_length": 16, "seed": 5}
# Six heads: ALiBi's slopes for a head count that is not a power of two; a
# config.json as Hugging Face writes it.
BLOOM_6 = {
    "model_type": "bloom", "architectures": ["BloomForCausalLM"], "vocab_size": 96,
    "n_embed": 48, "num_hidden_layers": 2, "num_attention_heads": 6, "seq_length": 16,
    "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "hidden_dropout": 0.0,
    "attention_dropout": 0.0, "apply_residual_connection_post_layernorm": False,
    "masked_softmax_fusion": True, "offset_alibi": 100, "pretraining_tp": 1,
    "slow_but_exact": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
    "unk_token_id": 0, "use_cache": True, "seed": 7,
}
CASES = {"llama_gqa": LLAMA_GQA, "llama_mqa_tied_llama3": LLAMA_MQA, "mistral": MISTRAL,
         "bloom": BLOOM, "bloom_6_heads": BLOOM_6}

_RUNS = {}


def engine_run_of(name, parity_tool, tmp_path_factory, precision="fp32"):
    key = (name, precision)
    if key not in _RUNS:
        config = ds_config(2, 2, adamw(0.1))
        if precision == "bf16":
            config["bf16"] = {"enabled": True}
        out = tmp_path_factory.mktemp(f"{name}_{precision}")
        run_tool(parity_tool, out, CASES[name], config, steps=STEPS,
                 extra_args=["--init-noise", "0.05"])
        _RUNS[key] = EngineRun(out, CASES[name], config)
    return _RUNS[key]


@pytest.fixture(params=sorted(CASES))
def engine_run(request, parity_tool, tmp_path_factory):
    return engine_run_of(request.param, parity_tool, tmp_path_factory)


def torch_model(run, dtype=torch.float32):
    model = torch_families.model_for(run.model_spec).to(dtype)
    own = dict(model.named_parameters())
    assert set(own) == set(run.init), (sorted(set(own) ^ set(run.init)))
    with torch.no_grad():
        for name, p in own.items():
            assert tuple(p.shape) == tuple(run.init[name].shape), name
            p.copy_(run.init[name].to(dtype))
    return model


def loss_backward(model, run, k, autocast=False):
    tokens, targets = run.batch(k)
    model.zero_grad(set_to_none=True)
    total = 0.0
    for i, chunk in enumerate(range(0, tokens.shape[0], tokens.shape[0] // run.accum)):
        rows = slice(chunk, chunk + tokens.shape[0] // run.accum)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            _, loss = model(tokens[rows], targets[rows])
        (loss / run.accum).backward()
        total += loss.item() / run.accum
    return total


# ---------------------------------------------------------------------------
# The torch twins on their own
# ---------------------------------------------------------------------------


def randomized(spec, seed=0):
    model = torch_families.model_for(spec).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return model


TINY_LLAMA = dict(LLAMA_MQA, vocab_size=11, hidden_size=8, intermediate_size=12,
                  num_attention_heads=2, num_key_value_heads=1, seq_length=5)
TINY_BLOOM = dict(BLOOM, vocab_size=11, hidden_size=12, n_head=3, seq_length=5)


@pytest.mark.parametrize("spec", [TINY_LLAMA, TINY_BLOOM], ids=["llama", "bloom"])
def test_torch_twin_gradcheck_and_causality(spec):
    model = randomized(spec)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, spec["vocab_size"], (2, 5), generator=g)
    tgt = torch.randint(0, spec["vocab_size"], (2, 5), generator=g)
    names = [n for n, _ in model.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in model.parameters())

    def loss_fn(*ps):
        _, loss = torch.nn.utils.stateless.functional_call(model, dict(zip(names, ps)), (idx, tgt))
        return loss

    assert torch.autograd.gradcheck(loss_fn, params, eps=1e-6, atol=1e-6, rtol=1e-5)
    logits, _ = model(idx)
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % spec["vocab_size"]
    torch.testing.assert_close(model(changed)[0][:, :-1], logits[:, :-1], rtol=0, atol=0)


def test_torch_twins_use_huggingface_names():
    llama = dict(torch_families.model_for(dict(LLAMA_GQA, num_hidden_layers=1)).named_parameters())
    assert set(llama) == {
        "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
        "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight"}
    assert tuple(llama["model.layers.0.self_attn.k_proj.weight"].shape) == (16, 32)  # 2 kv heads
    bloom = dict(torch_families.model_for(dict(BLOOM, n_layer=1)).named_parameters())
    assert "transformer.h.0.self_attention.query_key_value.weight" in bloom
    assert "transformer.word_embeddings_layernorm.bias" in bloom
    assert "lm_head.weight" not in bloom


def test_alibi_slopes_are_blooms():
    assert torch_families.build_alibi_slopes(8).tolist() == [2 ** -k for k in range(1, 9)]
    six = torch_families.build_alibi_slopes(6).tolist()
    assert six == pytest.approx([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])


# ---------------------------------------------------------------------------
# Engine versus torch
# ---------------------------------------------------------------------------


def test_engine_declares_the_huggingface_tensors(engine_run):
    model = torch_families.model_for(engine_run.model_spec)
    want = {n: tuple(p.shape) for n, p in model.named_parameters()}
    got = {n: tuple(t.shape) for n, t in engine_run.init.items()}
    assert got == want
    assert engine_run.result["num_parameters"] == sum(math.prod(s) for s in want.values())


def test_loss_and_every_gradient_match_torch(engine_run):
    """Against PyTorch in float64: the loss within 1e-4 and every gradient
    within 1e-4 norm-relative, or, where a tensor's gradient is so small
    that fp32 itself cannot resolve it (a deep layer's attention projections
    while its attention is near uniform: PyTorch's own fp32 gradient is 3e-4
    from float64 there), within 3x PyTorch fp32's distance from float64."""
    exact = torch_model(engine_run, torch.float64)
    loss = loss_backward(exact, engine_run, 0)
    loss0 = engine_run.result["loss0"]
    assert rel(loss0, loss) <= LOSS_RTOL, f"batch 0 loss: engine {loss0!r}, torch {loss!r}"
    fp32 = torch_model(engine_run)
    loss_backward(fp32, engine_run, 0)
    want, theirs = dict(exact.named_parameters()), dict(fp32.named_parameters())
    errors = {n: norm_rel(g, want[n].grad) for n, g in engine_run.grads.items()}
    roundoff = {n: norm_rel(theirs[n].grad, want[n].grad) for n in errors}
    bad = {n: (errors[n], roundoff[n]) for n in errors
           if not errors[n] <= max(GRAD_RTOL, 3 * roundoff[n])}
    worst = max(errors, key=errors.get)
    assert not bad, f"(engine, torch fp32) distance from float64: {bad}"
    print(f"loss rel {rel(loss0, loss):.2e}; worst gradient {worst}: {errors[worst]:.2e} "
          f"(torch fp32 {roundoff[worst]:.2e})")


def test_adamw_training_matches_torch(engine_run):
    model = torch_model(engine_run)
    opt = torch_optimizer(engine_run.config, model.parameters())
    losses = []
    for k in range(1, STEPS + 1):
        losses.append(loss_backward(model, engine_run, k))
        opt.step()
    errs = [rel(e, t) for e, t in zip(engine_run.result["train_losses"], losses)]
    assert max(errs) <= TRAIN_RTOL, (engine_run.result["train_losses"], losses)
    own = dict(model.named_parameters())
    drift = {n: norm_rel(engine_run.final[n] - engine_run.init[n], own[n].detach() - engine_run.init[n])
             for n in engine_run.final}
    worst = max(drift, key=drift.get)
    assert drift[worst] <= UPDATE_RTOL, f"weight update differs most in {worst}: {drift[worst]:.3e}"
    print(f"worst training loss rel {max(errs):.2e}; worst update {worst}: {drift[worst]:.2e}")


# bf16 (test_parity_bf16.py's bounds: autocast rounds GEMM inputs only, the
# engine rounds every layer's output and input gradient too; both within bf16
# roundoff). A norm's weight gradient sums its output gradient times the
# normalised input over every token, with heavy cancellation in the last
# layer: the engine's is up to 5.7e-2 from fp32 there (autocast's 4.6e-3).
# That is roundoff, not a defect: the same run in fp16 is 8x closer (2.2e-3;
# fp16 has 3 more mantissa bits) and with bf16 GEMMs off 3x closer (2.0e-2).
# The bound for norm weights is 15 u, every other tensor's 5 u.
BF16_LOSS_RTOL = 4e-3
BF16_GRAD_FLOOR = 2e-2
BF16_NORM_GRAD_FLOOR = 6e-2
BF16_TRAIN_RTOL = 1e-2


@pytest.mark.bf16_compute  # autocast multiplies in bf16: so must the engine
@pytest.mark.parametrize("name", ["llama_gqa", "bloom_6_heads"])
def test_bf16_tracks_torch_autocast(name, parity_tool, tmp_path_factory):
    run = engine_run_of(name, parity_tool, tmp_path_factory, "bf16")
    model = torch_model(run)
    loss = loss_backward(model, run, 0, autocast=True)
    assert rel(run.result["loss0"], loss) <= BF16_LOSS_RTOL, (run.result["loss0"], loss)
    fp32 = torch_model(run)
    loss_backward(fp32, run, 0)
    auto, exact = dict(model.named_parameters()), dict(fp32.named_parameters())
    own = {n: norm_rel(auto[n].grad, exact[n].grad) for n in run.grads}
    mine = {n: norm_rel(g, exact[n].grad) for n, g in run.grads.items()}
    def floor(name):
        return BF16_NORM_GRAD_FLOOR if "norm" in name else BF16_GRAD_FLOOR

    bad = {n: (mine[n], own[n]) for n in mine if mine[n] > max(3 * own[n], floor(n))}
    assert not bad, f"farther from fp32 than 3x autocast (or 5 u, 15 u for norms): {bad}"
    model = torch_model(run)
    opt = torch_optimizer(run.config, model.parameters())
    losses = []
    for k in range(1, STEPS + 1):
        losses.append(loss_backward(model, run, k, autocast=True))
        opt.step()
    errs = [rel(e, t) for e, t in zip(run.result["train_losses"], losses)]
    assert max(errs) <= BF16_TRAIN_RTOL, (run.result["train_losses"], losses)
