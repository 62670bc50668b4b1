"""Adam / AdamW's documented parameters as DeepSpeed defines them, against a
PyTorch implementation written here from DeepSpeed's FusedAdam / CPU-Adam
algorithm: bias_correction true and false, adam_w_mode true (decoupled
decay) and false (L2 in the gradient), over several steps of a sequential
model, ZeRO 0 and 2 at dp 1: the weights within 1e-5 relative every step.
amsgrad is refused by name, as DeepSpeed's FusedAdam and CPU-Adam refuse it.
"""
import os
import pathlib
import sys

import numpy as np
import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = {"type": "sequential", "input_dim": 8, "loss": "mse", "seed": 3,
         "layers": [{"type": "linear", "out_features": 16}, {"type": "gelu"},
                    {"type": "linear", "out_features": 4}]}


@pytest.fixture(scope="module")
def dstrain(build_dir):
    os.environ["DSTRAIN_LIBRARY"] = str(build_dir / "libdstrain.so")
    sys.path.insert(0, str(REPO / "sdk-python" / "src"))
    import dstrain as sdk
    return sdk


def deepspeed_adam_step(p, g, m, v, step, lr, betas, eps, wd, adam_w_mode, bias_correction):
    """DeepSpeed's FusedAdam (multi_tensor_adam) for one tensor, in float64."""
    b1, b2 = betas
    if not adam_w_mode and wd:
        g = g + wd * p
    m[:] = b1 * m + (1 - b1) * g
    v[:] = b2 * v + (1 - b2) * g * g
    bc1 = 1 - b1 ** step if bias_correction else 1.0
    bc2 = 1 - b2 ** step if bias_correction else 1.0
    denom = np.sqrt(v) / np.sqrt(bc2) + eps
    update = (m / bc1) / denom
    if adam_w_mode and wd:
        update = update + wd * p
    p -= lr * update


def torch_grads(params, x, y):
    """The gradients of the sequential model's MSE at `params` (float64)."""
    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    h = torch.from_numpy(x).double() @ t["layers.0.weight"].t() + t["layers.0.bias"]
    h = torch.nn.functional.gelu(h, approximate="tanh")
    out = h @ t["layers.2.weight"].t() + t["layers.2.bias"]
    loss = ((out - torch.from_numpy(y).double()) ** 2).mean()
    loss.backward()
    return {k: t[k].grad.numpy() for k in params}


@pytest.mark.parametrize("adam_w_mode", [True, False])
@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("stage", [0, 2])
def test_adam_follows_deepspeeds_update(dstrain, adam_w_mode, bias_correction, stage):
    opt = {"lr": 1e-2, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1,
           "adam_w_mode": adam_w_mode, "bias_correction": bias_correction}
    config = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
              "optimizer": {"type": "Adam", "params": opt},
              "zero_optimization": {"stage": stage}, "dstrain": {"num_threads": 1}}
    rng = np.random.default_rng(5)
    with dstrain.Engine(config, MODEL) as engine:
        params = {p.name: engine.get_param(p.name).astype(np.float64)
                  for p in engine.parameters()}
        m = {k: np.zeros_like(v) for k, v in params.items()}
        v = {k: np.zeros_like(x) for k, x in params.items()}
        if "gelu" not in [layer["type"] for layer in MODEL["layers"]]:
            pytest.fail("the reference assumes the GELU model")
        for step in range(1, 6):
            x = rng.standard_normal((4, 8)).astype(np.float32)
            y = rng.standard_normal((4, 4)).astype(np.float32)
            grads = torch_grads(params, x, y)
            for k in params:
                deepspeed_adam_step(params[k], grads[k], m[k], v[k], step, opt["lr"],
                                    opt["betas"], opt["eps"], opt["weight_decay"], adam_w_mode,
                                    bias_correction)
            engine.train_batch(x, y)
            for k, want in params.items():
                got = engine.get_param(k)
                rel = np.linalg.norm(got - want) / np.linalg.norm(want)
                assert rel < 1e-5, (step, k, rel)


def test_amsgrad_is_refused_by_name(dstrain):
    config = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
              "optimizer": {"type": "AdamW", "params": {"amsgrad": True}}}
    with pytest.raises(dstrain.NotSupportedError, match="amsgrad.*FusedAdam"):
        dstrain.Engine(config, MODEL)
