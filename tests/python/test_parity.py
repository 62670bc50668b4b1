"""Parity of dstrain's GPT with PyTorch (DESIGN.md section 6.2).

tests/tools/dst_parity_tool (C ABI only) dumps the engine's initial weights, a
set of deterministic batches, the gradients of batch 0 and the losses of N
training steps. PyTorch (torch_gpt.py) loads the same weights and must
reproduce the loss and every gradient of batch 0, then the loss trajectory of N
optimizer steps. The first tests validate the torch model on its own, so that a
later mismatch points at the engine.
"""

import json
import math
import os
import subprocess

import numpy as np
import pytest
import torch

import safetensors_io
import torch_gpt

TOOL_TIMEOUT_S = 300
STEPS = 10
LOSS_RTOL = 1e-4
GRAD_RTOL = 1e-4
UPDATE_RTOL = 5e-3

SMALL_GPT = {
    "type": "gpt",
    "vocab_size": 256,
    "n_ctx": 16,
    "n_layer": 2,
    "n_head": 2,
    "d_model": 32,
    "seed": 1234,
}


def ds_config(micro, accum, optimizer):
    return {
        "train_batch_size": micro * accum,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "optimizer": optimizer,
        "dstrain": {"num_threads": 1},
    }


def adamw(weight_decay):
    return {
        "type": "AdamW",
        "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": weight_decay},
    }


SGD = {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}}

# name -> (model spec, ds_config, extra tool arguments). The GPT-2 init has
# LayerNorm weight 1 and bias 0, which hides any mistake that multiplies by or
# adds them; --init-noise perturbs every parameter (via dst_engine_set_param)
# so those paths are exercised too.
CASES = {
    "adamw_micro2_accum1": (dict(SMALL_GPT), ds_config(2, 1, adamw(0.0)), []),
    "adamw_micro2_accum2_wd": (dict(SMALL_GPT, seed=7), ds_config(2, 2, adamw(0.1)), []),
    "adamw_perturbed_init": (
        dict(SMALL_GPT, seed=11),
        ds_config(2, 1, adamw(0.1)),
        ["--init-noise", "0.05"],
    ),
    "sgd_momentum": (dict(SMALL_GPT, seed=99), ds_config(2, 1, SGD), []),
}


def torch_optimizer(config, params):
    opt = config["optimizer"]
    p = opt["params"]
    if opt["type"] == "AdamW":
        return torch.optim.AdamW(
            params,
            lr=p["lr"],
            betas=tuple(p["betas"]),
            eps=p["eps"],
            weight_decay=p["weight_decay"],
            foreach=False,
        )
    if opt["type"] == "SGD":
        return torch.optim.SGD(params, lr=p["lr"], momentum=p["momentum"], foreach=False)
    raise ValueError(opt["type"])


# ---------------------------------------------------------------------------
# Running the engine
# ---------------------------------------------------------------------------


class EngineRun:
    def __init__(self, out_dir, model, config):
        self.dir = out_dir
        self.model_spec = model
        self.config = config
        self.result = json.loads((out_dir / "result.json").read_text())
        self.init = safetensors_io.load_torch(str(out_dir / "init.safetensors"))
        self.grads = safetensors_io.load_torch(str(out_dir / "grads.safetensors"))
        self.final = safetensors_io.load_torch(str(out_dir / "final.safetensors"))
        self.batches = safetensors_io.load_torch(str(out_dir / "batches.safetensors"))

    def batch(self, k):
        return (self.batches[f"tokens_{k}"].long(), self.batches[f"targets_{k}"].long())

    @property
    def accum(self):
        return self.config["gradient_accumulation_steps"]


def run_tool(tool, out_dir, model, config, steps=STEPS, extra_args=()):
    out_dir.mkdir(parents=True, exist_ok=True)
    model_path = out_dir / "model.json"
    config_path = out_dir / "ds_config.json"
    model_path.write_text(json.dumps(model, indent=2))
    config_path.write_text(json.dumps(config, indent=2))
    cmd = [
        str(tool),
        "--model", str(model_path),
        "--config", str(config_path),
        "--out", str(out_dir),
        "--steps", str(steps),
        *extra_args,
    ]  # fmt: skip
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, env=env
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(cmd)} did not finish within {TOOL_TIMEOUT_S} s")
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} exited with {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


_RUNS = {}


@pytest.fixture(params=sorted(CASES))
def engine_run(request, parity_tool, tmp_path_factory):
    """One tool run per case, shared by the tests that look at it."""
    name = request.param
    if name not in _RUNS:
        model, config, extra = CASES[name]
        out = tmp_path_factory.mktemp(name)
        run_tool(parity_tool, out, model, config, extra_args=extra)
        _RUNS[name] = EngineRun(out, model, config)
    return _RUNS[name]


def torch_model_from(run):
    torch.manual_seed(0)
    cfg = torch_gpt.GPTConfig.from_spec(run.model_spec)
    model = torch_gpt.GPT(cfg).float()
    torch_gpt.load_params_(model, run.init)
    return model


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def norm_rel(x, ref):
    x = x.double()
    ref = ref.double()
    denom = ref.norm().item()
    diff = (x - ref).norm().item()
    if denom == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / denom


# ---------------------------------------------------------------------------
# The torch model on its own
# ---------------------------------------------------------------------------

TINY = torch_gpt.GPTConfig(vocab_size=7, n_ctx=5, n_layer=2, n_head=2, d_model=4, seed=3)


def tiny_batch(cfg, b=2, t=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = cfg.n_ctx if t is None else t
    idx = torch.randint(0, cfg.vocab_size, (b, t), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (b, t), generator=g)
    tgt[0, 1] = -1
    return idx, tgt


def randomize_(model, seed=0):
    """Non-trivial values everywhere (LayerNorm weights and biases too)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return model


def test_torch_model_names_and_shapes_match_spec():
    model = torch_gpt.GPT(TINY)
    got = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    assert got == list(torch_gpt.expected_param_shapes(TINY).items())


def test_torch_gpt_gradcheck_float64():
    model = randomize_(torch_gpt.GPT(TINY).double())
    idx, tgt = tiny_batch(TINY)
    names = [n for n, _ in model.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in model.parameters())

    def loss_fn(*ps):
        _, loss = torch.nn.utils.stateless.functional_call(
            model, dict(zip(names, ps)), (idx, tgt)
        )
        return loss

    assert torch.autograd.gradcheck(loss_fn, params, eps=1e-6, atol=1e-6, rtol=1e-5)


def _np_layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def _np_reference_loss(p, cfg, idx, tgt):
    """An independent float64 NumPy forward written from the spec."""
    b, t = idx.shape
    c, h = cfg.d_model, cfg.n_head
    hs = c // h
    x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][np.arange(t)]
    for i in range(cfg.n_layer):
        q = lambda s: p[f"transformer.h.{i}.{s}"]  # noqa: E731
        a = _np_layernorm(x, q("ln_1.weight"), q("ln_1.bias"))
        qkv = a @ q("attn.c_attn.weight").T + q("attn.c_attn.bias")
        y = np.zeros((b, t, c))
        for head in range(h):
            sl = slice(head * hs, (head + 1) * hs)
            qq = qkv[:, :, 0 * c : 1 * c][:, :, sl]
            kk = qkv[:, :, 1 * c : 2 * c][:, :, sl]
            vv = qkv[:, :, 2 * c : 3 * c][:, :, sl]
            s = qq @ kk.transpose(0, 2, 1) / math.sqrt(hs)
            s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            y[:, :, sl] = s @ vv
        x = x + y @ q("attn.c_proj.weight").T + q("attn.c_proj.bias")
        m = _np_layernorm(x, q("ln_2.weight"), q("ln_2.bias"))
        u = m @ q("mlp.c_fc.weight").T + q("mlp.c_fc.bias")
        u = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        x = x + u @ q("mlp.c_proj.weight").T + q("mlp.c_proj.bias")
    x = _np_layernorm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"])
    logits = x @ p["transformer.wte.weight"].T
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    flat_t = tgt.reshape(-1)
    keep = flat_t != -1
    nll = -logp.reshape(-1, cfg.vocab_size)[keep, flat_t[keep]]
    return nll.mean(), logits


def test_torch_gpt_matches_independent_numpy_reference():
    model = randomize_(torch_gpt.GPT(TINY).double(), seed=5)
    idx, tgt = tiny_batch(TINY, b=3, seed=1)
    logits, loss = model(idx, tgt)
    p = {n: v.detach().numpy() for n, v in model.named_parameters()}
    ref_loss, ref_logits = _np_reference_loss(p, TINY, idx.numpy(), tgt.numpy())
    np.testing.assert_allclose(logits.detach().numpy(), ref_logits, rtol=1e-10, atol=1e-12)
    assert loss.item() == pytest.approx(ref_loss, rel=1e-12)


def test_torch_gpt_is_causal_and_handles_short_sequences():
    model = randomize_(torch_gpt.GPT(TINY).double(), seed=2)
    idx, _ = tiny_batch(TINY)
    logits, _ = model(idx)
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % TINY.vocab_size
    logits2, _ = model(changed)
    torch.testing.assert_close(logits[:, :-1], logits2[:, :-1], rtol=0, atol=0)
    assert not torch.allclose(logits[:, -1], logits2[:, -1])
    short, _ = model(idx[:, :3])
    torch.testing.assert_close(short, logits[:, :3], rtol=1e-12, atol=1e-12)


def test_accumulated_gradients_equal_mean_of_micro_batch_means():
    model = randomize_(torch_gpt.GPT(TINY).double(), seed=4)
    idx, tgt = tiny_batch(TINY, b=4, seed=3)
    tgt[2:, :3] = -1  # different numbers of ignored targets per micro-batch
    loss = torch_gpt.accumulated_loss_backward(model, idx, tgt, accum=2)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    _, l0 = model(idx[:2], tgt[:2])
    _, l1 = model(idx[2:], tgt[2:])
    total = (l0 + l1) / 2
    total.backward()
    assert loss == pytest.approx(total.item(), rel=1e-12)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-12, atol=1e-14)


def test_safetensors_io_round_trip(tmp_path):
    tensors = {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "tok": np.array([[1, -1]], dtype=np.int32),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    path = tmp_path / "x.safetensors"
    safetensors_io.save(str(path), tensors, {"k": "v"})
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert (8 + n) % 8 == 0
    back, meta = safetensors_io.load_numpy(str(path))
    assert meta == {"k": "v"}
    assert list(back) == list(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        np.testing.assert_array_equal(back[k], v)
    path.write_bytes(raw[:-1])
    with pytest.raises(safetensors_io.SafetensorsError):
        safetensors_io.load_numpy(str(path))


# ---------------------------------------------------------------------------
# Engine versus torch
# ---------------------------------------------------------------------------


def test_init_safetensors_has_exact_names_and_shapes(engine_run):
    header, _, start = safetensors_io.read_header(str(engine_run.dir / "init.safetensors"))
    assert start % 8 == 0
    cfg = torch_gpt.GPTConfig.from_spec(engine_run.model_spec)
    expected = torch_gpt.expected_param_shapes(cfg)
    got = {name: tuple(e["shape"]) for name, e in header.items()}
    assert got == dict(expected)
    assert all(e["dtype"] == "F32" for e in header.values())
    n_params = sum(math.prod(s) for s in expected.values())
    assert engine_run.result["num_parameters"] == n_params
    for name, t in engine_run.init.items():
        assert torch.isfinite(t).all(), name


def test_batches_are_well_formed(engine_run):
    r = engine_run.result
    cfg = engine_run.model_spec
    for k in range(STEPS + 1):
        tok, tgt = engine_run.batch(k)
        assert tuple(tok.shape) == (r["n_samples"], cfg["n_ctx"])
        assert tok.min() >= 0 and tok.max() < cfg["vocab_size"]
        assert tgt.min() >= -1 and tgt.max() < cfg["vocab_size"]
        assert (tgt == -1).any()


def test_loss_and_every_gradient_match_torch(engine_run):
    model = torch_model_from(engine_run)
    tokens, targets = engine_run.batch(0)
    model.zero_grad()
    loss = torch_gpt.accumulated_loss_backward(model, tokens, targets, engine_run.accum)
    loss0 = engine_run.result["loss0"]
    assert rel(loss0, loss) <= LOSS_RTOL, f"batch 0 loss: engine {loss0!r}, torch {loss!r}"

    torch_grads = dict(model.named_parameters())
    assert set(engine_run.grads) == set(torch_grads)
    errors = {}
    for name, g_engine in engine_run.grads.items():
        g_torch = torch_grads[name].grad
        assert tuple(g_engine.shape) == tuple(g_torch.shape), name
        errors[name] = norm_rel(g_engine, g_torch)
    worst = max(errors, key=errors.get)
    bad = {k: v for k, v in errors.items() if not v <= GRAD_RTOL}
    assert not bad, (
        f"{len(bad)} of {len(errors)} gradients differ by more than {GRAD_RTOL} "
        f"(norm-relative); worst {worst}: {errors[worst]:.3e}; all failing: "
        + ", ".join(f"{k}={v:.2e}" for k, v in sorted(bad.items(), key=lambda kv: -kv[1]))
    )
    print(f"worst gradient {worst}: {errors[worst]:.3e}; loss rel {rel(loss0, loss):.3e}")


def test_training_losses_match_torch(engine_run):
    model = torch_model_from(engine_run)
    opt = torch_optimizer(engine_run.config, model.parameters())
    r = engine_run.result
    assert len(r["train_losses"]) == STEPS
    assert r["step_count"] == STEPS
    lr = engine_run.config["optimizer"]["params"]["lr"]
    assert r["lrs"] == pytest.approx([lr] * STEPS, rel=1e-12), "constant LR expected"
    torch_losses = []
    for k in range(1, STEPS + 1):
        tokens, targets = engine_run.batch(k)
        opt.zero_grad(set_to_none=True)
        torch_losses.append(
            torch_gpt.accumulated_loss_backward(model, tokens, targets, engine_run.accum)
        )
        opt.step()
    errs = [rel(e, t) for e, t in zip(r["train_losses"], torch_losses)]
    worst = int(np.argmax(errs))
    assert max(errs) <= LOSS_RTOL, (
        f"training losses differ; worst step {worst + 1}: rel {errs[worst]:.3e}\n"
        f"engine {r['train_losses']}\ntorch  {torch_losses}"
    )
    # The weight updates over the N steps. The losses alone are not enough: a
    # wrong weight decay (e.g. skipping LayerNorm weights) changes the losses by
    # only ~1e-5 relative here but the LayerNorm updates by ~30%. The bound is
    # loose because Adam turns float noise in gradients that are zero in exact
    # arithmetic (the key part of c_attn.bias) into full-size updates (~5e-4).
    drift = {}
    own = dict(model.named_parameters())
    for name, p_final in engine_run.final.items():
        d_engine = p_final - engine_run.init[name]
        d_torch = own[name].detach() - engine_run.init[name]
        drift[name] = norm_rel(d_engine, d_torch)
    worst_p = max(drift, key=drift.get)
    assert drift[worst_p] <= UPDATE_RTOL, f"weight update differs most in {worst_p}: {drift[worst_p]:.3e}"
    print(f"worst loss rel {errs[worst]:.3e}; worst update {worst_p}: {drift[worst_p]:.3e}")


def test_engine_checkpoint_is_readable_safetensors(parity_tool, tmp_path):
    """model.safetensors written by core/checkpoint (WriteSafetensors) parses here
    and holds exactly the weights the C ABI reports."""
    model, config, _ = CASES["adamw_micro2_accum1"]
    run_tool(parity_tool, tmp_path, model, config, steps=2, extra_args=["--save-checkpoint"])
    ckpt = tmp_path / "checkpoint"
    tag = (ckpt / "latest").read_text().strip()
    path = ckpt / tag / "model.safetensors"
    header, _, start = safetensors_io.read_header(str(path))
    assert start % 8 == 0
    weights, _ = safetensors_io.load_numpy(str(path))
    final, _ = safetensors_io.load_numpy(str(tmp_path / "final.safetensors"))
    assert set(weights) == set(final)
    for name, w in weights.items():
        assert w.dtype == np.float32, name
        np.testing.assert_array_equal(w, final[name], err_msg=name)
