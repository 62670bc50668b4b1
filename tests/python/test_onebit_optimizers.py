"""1-bit Adam, 0/1 Adam and 1-bit LAMB as DeepSpeed defines them (OnebitAdam with its NCCL backend's
compressed all-reduce; Tang et al. 2021), against an implementation written
here from that algorithm:

- up to freeze_step: Adam on the all-reduced gradient, no bias correction,
  decay decoupled (p -= lr (m / (sqrt(v) + eps) + wd p));
- after it: no gradient all-reduce; each rank's momentum from its own
  gradient (m = b1 m + (1 - b1) g_rank), the variance frozen, the momenta
  replaced by their compressed mean — per tensor, padded to a multiple of
  world x lcm(world, 8), one sign bit per element and an RMS scale, worker
  error feedback, then each server's chunk averaged, compressed again with
  the server's error feedback, and gathered — and the same update.

0/1 Adam (ZeroOneAdam; Lu et al. 2022): variance steps (all-reduced
gradient, Adam) at an interval that doubles after var_update_scaler of them,
the steps between exchanging the gradient in 1 bit (the momentum only);
after var_freeze_step local steps (each rank's own momentum and weights,
the steps accumulated) with a synchronisation at an interval that doubles
after local_step_scaler steps up to local_step_clipper: the accumulated
steps scaled by the denominator, exchanged in 1 bit, the momentum rebuilt
from them; the error feedback restarts at the freeze.

1-bit LAMB (OneBitLamb; Li et al. 2021): up to freeze_step LAMB on the
all-reduced gradient (no bias correction, eps outside the root, the trust
ratio clamped to [min_coeff, max_coeff], its running average kept per
tensor); the variance frozen, a fresh one started from it; after it each
rank's momentum scaled by its tensor's frozen scaling (the mean momentum RMS
over the tensors' at the freeze), all tensors exchanged in 1 bit as one
buffer, unscaled; the gradient that momentum implies feeds the fresh
variance; the frozen ratio rescaled by max(denom / fresh denom) (moved
towards 1 by the weight decay's share, clamped to [factor_min, factor_max]
and to the last factor +- factor_threshold).

On 1 and 2 ranks over enough steps to pass the freeze points: the weights
within 1e-5 relative every step (fp32). The bytes the exchange sent after
the warm-up, from the metrics, against the fp32 bytes a gradient all-reduce
carries; fp16 with loss scaling and a checkpoint resume train; the refusals
name DeepSpeed's reason.
"""
import json
import math
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
MODEL = {"type": "sequential", "input_dim": 8, "loss": "mse", "seed": 3,
         "layers": [{"type": "linear", "out_features": 16}, {"type": "gelu"},
                    {"type": "linear", "out_features": 4}]}
PARAMS = {"lr": 1e-2, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.01,
          "freeze_step": 3, "cuda_aware": False, "comm_backend_name": "nccl"}
STEPS = 8
MICRO = 4


def run_workers(build_dir, config, world, steps=STEPS):
    """Each rank's JSON lines (through files: a full pipe would stall a rank
    inside a collective while its peer waits)."""
    port, token = dp_tests.free_port(), secrets.token_hex(8)
    procs, outs = [], []
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="onebit_"))
    for rank in range(world):
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   DSTRAIN_LIBRARY=str(build_dir / "libdstrain.so"),
                   DSTRAIN_SDK=str(REPO / "sdk-python" / "src"))
        if world > 1:
            env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                        "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port), "DSTRAIN_JOB_TOKEN": token})
        outs.append(workdir / f"rank{rank}.out")
        with open(outs[-1], "w") as out, open(workdir / f"rank{rank}.err", "w") as err:
            procs.append(subprocess.Popen(
                [sys.executable, str(HERE / "onebit_worker.py"), json.dumps(config),
                 json.dumps(MODEL), str(steps)], stdout=out, stderr=err, env=env))
    runs = []
    for rank, p in enumerate(procs):
        try:
            p.wait(timeout=120)
        finally:
            for q in procs:
                if q.poll() is None and p.returncode is None:
                    q.kill()
        err = (workdir / f"rank{rank}.err").read_text()
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}: {err[-3000:]}"
        runs.append([json.loads(line) for line in outs[rank].read_text().splitlines()
                     if line.startswith("{")])
    shutil.rmtree(workdir)
    return runs


def config_for(world, optimizer="OneBitAdam", base=PARAMS, **params):
    opt = dict(base, **params)
    return {"train_batch_size": MICRO * world, "train_micro_batch_size_per_gpu": MICRO,
            "optimizer": {"type": optimizer, "params": opt},
            "zero_optimization": {"stage": 0},
            "dstrain": {"num_threads": 1, "comm_timeout_seconds": 60}}


def samples(step, rank):
    rng = np.random.default_rng(1000 * step + rank)
    return (rng.standard_normal((MICRO, 8)).astype(np.float32),
            rng.standard_normal((MICRO, 4)).astype(np.float32))


def torch_grads(params, x, y):
    """The gradients of the sequential model's MSE at `params` (float64)."""
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    h = torch.from_numpy(x).double() @ t["layers.0.weight"].t() + t["layers.0.bias"]
    h = torch.nn.functional.gelu(h, approximate="tanh")
    out = h @ t["layers.2.weight"].t() + t["layers.2.bias"]
    loss = ((out - torch.from_numpy(y).double()) ** 2).mean()
    loss.backward()
    return {k: t[k].grad.numpy() for k in params}


def sign(x):
    return np.where(x >= 0, 1.0, -1.0)  # sign(0) = +1, as DeepSpeed's packing


class CompressedAllReduce:
    """DeepSpeed's compressed_allreduce for one tensor over `world` ranks,
    keeping every rank's worker error and every server chunk's error."""

    def __init__(self, numel, world):
        unit = world * (world * 8 // math.gcd(world, 8))
        self.numel, self.world = numel, world
        self.padded = -(-numel // unit) * unit
        self.chunk = self.padded // world
        self.worker_error = np.zeros((world, self.padded))
        self.server_error = np.zeros((world, self.chunk))

    def __call__(self, values):
        w, c = self.world, self.chunk
        scales, signs = [], []
        for r, v in enumerate(values):
            x = np.zeros(self.padded)
            x[:self.numel] = v.reshape(-1)
            x += self.worker_error[r]
            s = np.linalg.norm(x) / np.sqrt(self.padded)
            self.worker_error[r] = x - s * sign(x)
            scales.append(s)
            signs.append(sign(x))
        out = np.zeros(self.padded)
        for j in range(w):
            y = sum(scales[r] * signs[r][j * c:(j + 1) * c] / w for r in range(w))
            y = y + self.server_error[j]
            s = np.linalg.norm(y) / np.sqrt(c)
            self.server_error[j] = y - s * sign(y)
            out[j * c:(j + 1) * c] = s * sign(y)
        return out[:self.numel].reshape(values[0].shape)


def reference(initial, world, steps, opt):
    """OnebitAdam on `world` ranks (every rank holds the same weights and
    momenta): the weights after each step."""
    lr, (b1, b2), eps, wd = opt["lr"], opt["betas"], opt["eps"], opt["weight_decay"]
    p = {k: np.array(v, dtype=np.float64) for k, v in initial.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    exchange = {k: CompressedAllReduce(x.size, world) for k, x in p.items()}
    history = []
    for step in range(1, steps + 1):
        grads = [torch_grads(p, *samples(step, r)) for r in range(world)]
        for k in p:
            if step <= opt["freeze_step"]:
                g = sum(gr[k] for gr in grads) / world
                m[k] = b1 * m[k] + (1 - b1) * g
                v[k] = b2 * v[k] + (1 - b2) * g * g
            else:
                local = [b1 * m[k] + (1 - b1) * gr[k] for gr in grads]
                m[k] = exchange[k](local) if world > 1 else local[0]
            p[k] = p[k] - lr * (m[k] / (np.sqrt(v[k]) + eps) + wd * p[k])
        history.append({k: x.copy() for k, x in p.items()})
    return history


@pytest.mark.parametrize("world", [1, 2])
def test_onebit_adam_follows_deepspeeds_algorithm(build_dir, world):
    runs = run_workers(build_dir, config_for(world), world)
    initial = {k: np.array(x) for k, x in runs[0][0]["params"].items()}
    want = reference(initial, world, STEPS, PARAMS)
    for rank, run in enumerate(runs):
        steps = [r for r in run if "step" in r]
        assert len(steps) == STEPS
        for s, expected in zip(steps, want):
            for k, x in expected.items():
                got = np.array(s["params"][k])
                rel = np.linalg.norm(got - x) / np.linalg.norm(x)
                assert rel < 1e-5, (world, rank, s["step"], k, rel)
    # The compressed steps moved the ranks identically.
    if world == 2:
        assert runs[0][-2]["params"] == runs[1][-2]["params"]


ZERO_ONE = {"lr": 1e-2, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.01,
            "var_freeze_step": 6, "var_update_scaler": 2, "local_step_scaler": 2,
            "local_step_clipper": 4}
ZERO_ONE_STEPS = 12


def zero_one_kinds(opt, steps):
    """The policy: 'var', 'compressed', 'local' or 'sync' for steps 1..steps."""
    kinds, var_interval, var_counter, local_interval, local_counter = [], 1, 0, 1, 0
    for t in range(1, steps + 1):
        if t > opt["var_freeze_step"]:
            kinds.append("sync" if t % local_interval == 0 else "local")
            local_counter += 1
            if local_counter == opt["local_step_scaler"]:
                local_counter, local_interval = 0, min(opt["local_step_clipper"],
                                                       2 * local_interval)
        else:
            kinds.append("var" if t % var_interval == 0 else "compressed")
            if t % var_interval == 0:
                var_counter += 1
                if var_counter == opt["var_update_scaler"]:
                    var_counter, var_interval = 0, 2 * var_interval
    return kinds


def zero_one_reference(initial, world, steps, opt):
    """ZeroOneAdam on `world` ranks: each rank's weights after each step."""
    lr, (b1, b2), eps, wd = opt["lr"], opt["betas"], opt["eps"], opt["weight_decay"]
    P = [{k: np.array(v, dtype=np.float64) for k, v in initial.items()} for _ in range(world)]
    M = [{k: np.zeros_like(v) for k, v in P[0].items()} for _ in range(world)]
    A = [{k: np.zeros_like(v) for k, v in P[0].items()} for _ in range(world)]
    V = {k: np.zeros_like(v) for k, v in P[0].items()}
    exchange, lrs, history = None, 0.0, []
    for t, kind in enumerate(zero_one_kinds(opt, steps), start=1):
        if exchange is None or t == opt["var_freeze_step"] + 1:  # the errors restart
            exchange = {k: CompressedAllReduce(x.size, world) for k, x in P[0].items()}
        grads = [torch_grads(P[r], *samples(t, r)) for r in range(world)]
        for k in V:
            denom = np.sqrt(V[k]) + eps
            if kind == "var":
                g = sum(gr[k] for gr in grads) / world
                V[k] = b2 * V[k] + (1 - b2) * g * g
                denom = np.sqrt(V[k]) + eps
            elif kind == "compressed":
                g = exchange[k]([gr[k] for gr in grads]) if world > 1 else grads[0][k]
            for r in range(world):
                if kind in ("var", "compressed"):
                    M[r][k] = b1 * M[r][k] + (1 - b1) * g
                    P[r][k] = P[r][k] - lr * (M[r][k] / denom + wd * P[r][k])
                else:
                    M[r][k] = b1 * M[r][k] + (1 - b1) * grads[r][k]
                    d = -lr * (M[r][k] / denom + wd * P[r][k])
                    P[r][k] = P[r][k] + d
                    A[r][k] = A[r][k] + d
        if kind in ("local", "sync"):
            lrs += lr
        if kind == "sync":
            for k in V:
                denom = np.sqrt(V[k]) + eps
                for r in range(world):
                    P[r][k] = P[r][k] - A[r][k]
                    A[r][k] = A[r][k] * denom
                mean = exchange[k]([A[r][k] for r in range(world)]) if world > 1 else A[0][k]
                for r in range(world):
                    M[r][k] = -mean / lrs
                    P[r][k] = P[r][k] + mean / denom
                    A[r][k] = np.zeros_like(A[r][k])
            lrs = 0.0
        history.append([{k: x.copy() for k, x in P[r].items()} for r in range(world)])
    return history


def test_zero_one_policy_reaches_every_kind_of_step():
    kinds = zero_one_kinds(ZERO_ONE, ZERO_ONE_STEPS)
    assert kinds == ["var", "var", "compressed", "var", "compressed", "var", "sync", "sync",
                     "local", "sync", "local", "sync"], kinds


@pytest.mark.parametrize("world", [1, 2])
def test_zero_one_adam_follows_deepspeeds_algorithm(build_dir, world):
    config = config_for(world, "ZeroOneAdam", ZERO_ONE)
    runs = run_workers(build_dir, config, world, steps=ZERO_ONE_STEPS)
    initial = {k: np.array(x) for k, x in runs[0][0]["params"].items()}
    want = zero_one_reference(initial, world, ZERO_ONE_STEPS, ZERO_ONE)
    kinds = zero_one_kinds(ZERO_ONE, ZERO_ONE_STEPS)
    for rank, run in enumerate(runs):
        steps = [r for r in run if "step" in r]
        assert len(steps) == ZERO_ONE_STEPS
        for s, expected, kind in zip(steps, want, kinds):
            for k, x in expected[rank].items():
                got = np.array(s["params"][k])
                rel = np.linalg.norm(got - x) / np.linalg.norm(x)
                assert rel < 1e-5, (world, rank, s["step"], kind, k, rel)
    if world == 2:  # local steps part the ranks, a synchronisation joins them
        by_step = [[r for r in run if "step" in r] for run in runs]
        def gap(step):  # the ranks' largest relative difference after `step`
            a, b = (by_step[r][step - 1]["params"] for r in (0, 1))
            return max(np.linalg.norm(np.subtract(a[k], b[k])) / np.linalg.norm(a[k]) for k in a)
        # Step 9 is local; step 10 synchronises (each rank subtracts its own
        # accumulated steps from its weights, so they agree up to rounding).
        assert gap(9) > 1e-4 and gap(10) < 1e-6, (gap(9), gap(10))
        compression = runs[0][-1]["metrics"]["compression"]
        assert compression["algorithm"] == "zero_one_adam"
        assert compression["buckets"] == kinds.count("compressed") + kinds.count("sync")


ONEBIT_LAMB = {"lr": 1e-2, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.01,
               "max_coeff": 0.3, "min_coeff": 0.01, "freeze_step": 3, "coeff_beta": 0.9,
               "factor_max": 4.0, "factor_min": 0.5, "factor_threshold": 0.1,
               "bias_correction": False}
ONEBIT_LAMB_STEPS = 8


def onebit_lamb_reference(initial, world, steps, opt):
    """OnebitLamb on `world` ranks (weights and state identical on every
    rank): the weights after each step."""
    lr, (b1, b2), eps, wd = opt["lr"], opt["betas"], opt["eps"], opt["weight_decay"]
    names = list(initial)
    p = {k: np.array(v, dtype=np.float64) for k, v in initial.items()}
    m = {k: np.zeros_like(x) for k, x in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    fresh = {k: np.zeros_like(x) for k, x in p.items()}
    frozen = {k: 0.0 for k in p}
    last = {k: 1.0 for k in p}
    scaling = {}
    exchange = CompressedAllReduce(sum(x.size for x in p.values()), world)
    history = []
    for t in range(1, steps + 1):
        grads = [torch_grads(p, *samples(t, r)) for r in range(world)]
        if t <= opt["freeze_step"]:
            for k in names:
                g = sum(gr[k] for gr in grads) / world
                m[k] = b1 * m[k] + (1 - b1) * g
                v[k] = b2 * v[k] + (1 - b2) * g * g
                if t == opt["freeze_step"]:
                    fresh[k] = v[k].copy()
                u = m[k] / (np.sqrt(v[k]) + eps) + wd * p[k]
                coeff = 1.0
                wn, un = np.linalg.norm(p[k]), np.linalg.norm(u)
                if wn != 0 and un != 0:
                    coeff = min(max(wn / un, opt["min_coeff"]), opt["max_coeff"])
                if coeff != 1.0:
                    frozen[k] = opt["coeff_beta"] * frozen[k] + (1 - opt["coeff_beta"]) * coeff
                p[k] = p[k] - lr * coeff * u
        else:
            if t == opt["freeze_step"] + 1:
                rms = {k: np.linalg.norm(m[k]) / np.sqrt(m[k].size) for k in names}
                united = sum(rms.values()) / len(rms)
                scaling = {k: united / rms[k] for k in names}
            m_last = {k: m[k].copy() for k in names}
            local = [np.concatenate([((b1 * m[k] + (1 - b1) * gr[k]) * scaling[k]).reshape(-1)
                                     for k in names]) for gr in grads]
            flat = exchange(local) if world > 1 else local[0]
            at = 0
            for k in names:
                m[k] = flat[at:at + m[k].size].reshape(m[k].shape) / scaling[k]
                at += m[k].size
                g = (m[k] - b1 * m_last[k]) / (1 - b1)
                fresh[k] = b2 * fresh[k] + (1 - b2) * g * g
                denom = np.sqrt(v[k]) + eps
                prelim = m[k] / denom
                update = prelim + wd * p[k]
                factor = np.max(denom / (np.sqrt(fresh[k]) + eps))
                if wd > 0:
                    share = min(1.0, np.linalg.norm(prelim) / np.linalg.norm(update))
                    factor = factor * share + (1 - share)
                factor = min(max(factor, opt["factor_min"]), opt["factor_max"])
                factor = min(max(factor, last[k] * (1 - opt["factor_threshold"])),
                             last[k] * (1 + opt["factor_threshold"]))
                last[k] = factor
                p[k] = p[k] - lr * frozen[k] * factor * update
        history.append({k: x.copy() for k, x in p.items()})
    return history


@pytest.mark.parametrize("world", [1, 2])
def test_onebit_lamb_follows_deepspeeds_algorithm(build_dir, world):
    config = config_for(world, "OneBitLamb", ONEBIT_LAMB)
    runs = run_workers(build_dir, config, world, steps=ONEBIT_LAMB_STEPS)
    initial = {k: np.array(x) for k, x in runs[0][0]["params"].items()}
    want = onebit_lamb_reference(initial, world, ONEBIT_LAMB_STEPS, ONEBIT_LAMB)
    for rank, run in enumerate(runs):
        steps = [r for r in run if "step" in r]
        assert len(steps) == ONEBIT_LAMB_STEPS
        for s, expected in zip(steps, want):
            for k, x in expected.items():
                got = np.array(s["params"][k])
                rel = np.linalg.norm(got - x) / np.linalg.norm(x)
                assert rel < 1e-5, (world, rank, s["step"], k, rel)
    if world == 2:
        compression = runs[0][-1]["metrics"]["compression"]
        assert compression["algorithm"] == "onebit_lamb_momentum"
        assert compression["buckets"] == ONEBIT_LAMB_STEPS - ONEBIT_LAMB["freeze_step"]


def test_onebit_lamb_resumes_past_the_freeze_bit_for_bit(tmp_path, tool):
    """One rank (no error feedback to lose): the per-tensor values frozen at
    the freeze (scalings, averaged ratios, last factors) and the fresh
    variance come back from the checkpoint."""
    cfg, model = dp_tests.write_job(tmp_path, 0, 2, 2, 1, "onebit_lamb")
    config = json.loads(cfg.read_text())
    config["optimizer"] = {"type": "OneBitLamb", "params": dict(ONEBIT_LAMB, lr=3e-3)}
    cfg.write_text(json.dumps(config))
    ckpt = tmp_path / "ckpt"
    full = dp_tests.run_ranks(tool, cfg, model, 1, args=["--ckpt", str(ckpt), "--save-at", "5"],
                              steps=8)[0]
    assert full["save"]["status"] == "ok"
    resumed = dp_tests.run_ranks(tool, cfg, model, 1, args=["--ckpt", str(ckpt), "--resume"],
                                 steps=8)[0]
    assert resumed["load"]["status"] == "ok"
    assert resumed["losses"] == full["losses"][5:]


def test_the_compression_is_what_moves_the_weights(build_dir):
    """Against the same run without compression (freeze_step past the end):
    after the freeze point the weights part (the test above cannot pass by
    averaging exactly)."""
    compressed = run_workers(build_dir, config_for(2), 2)[0]
    exact = run_workers(build_dir, config_for(2, freeze_step=1000), 2)[0]
    before = [r for r in compressed if r.get("step") == PARAMS["freeze_step"]][0]
    same = [r for r in exact if r.get("step") == PARAMS["freeze_step"]][0]
    assert before["params"] == same["params"]
    after = [r for r in compressed if r.get("step") == STEPS][0]
    plain = [r for r in exact if r.get("step") == STEPS][0]
    w = np.array(after["params"]["layers.0.weight"])
    assert np.linalg.norm(w - np.array(plain["params"]["layers.0.weight"])) > 1e-4 * \
        np.linalg.norm(w)


def test_bytes_on_the_wire_after_the_warm_up(build_dir):
    """Each exchange sends one bit per (padded) element twice (to the
    servers, from them) and two scales per tensor: about 1/16 of the fp32
    bytes the gradient all-reduce carries."""
    run = run_workers(build_dir, config_for(2), 2)[0]
    compression = run[-1]["metrics"]["compression"]
    assert compression["algorithm"] == "onebit_adam_momentum"
    assert compression["buckets"] == STEPS - PARAMS["freeze_step"]
    dense = compression["dense_bytes"]
    numel = sum(np.array(x).size for x in run[0]["params"].values())
    assert dense == 4 * numel * (STEPS - PARAMS["freeze_step"])
    ratio = compression["payload_bytes"] / dense
    assert 0.02 < ratio < 0.15, compression  # padding and the scales on a 212-element model


def onebit_job(tmp_path, name, freeze_step):
    cfg, model = dp_tests.write_job(tmp_path, 0, 2, 2, 2, name)
    config = json.loads(cfg.read_text())
    config["optimizer"] = {"type": "OneBitAdam",
                           "params": {"lr": 1e-3, "freeze_step": freeze_step}}
    config["fp16"] = {"enabled": True, "initial_scale_power": 8}
    cfg.write_text(json.dumps(config))
    return cfg, model


@pytest.mark.parametrize("freeze_step", [3, 100])
def test_fp16_and_a_checkpoint_resume_train(tmp_path, tool, freeze_step):
    """fp16 with dynamic loss scaling on two ranks, through the freeze point
    or not; a run resumed from a checkpoint at step 4 continues bit for bit,
    past the freeze too: each rank's worker and server errors are in the
    checkpoint (DeepSpeed resets them on load, and a resumed run parted from
    the uninterrupted one: on AVX2-only CPUs its loss at step 8 spiked from
    4.54 to 6.69)."""
    cfg, model = onebit_job(tmp_path, f"onebit{freeze_step}", freeze_step)
    ckpt = tmp_path / "ckpt"
    full = dp_tests.run_ranks(tool, cfg, model, 2, args=["--ckpt", str(ckpt), "--save-at", "4"],
                              steps=12)
    losses = full[0]["losses"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert full[0]["losses"] == full[1]["losses"]
    meta = json.loads((ckpt / (ckpt / "latest").read_text().strip() / "meta.json").read_text())
    assert {name for e in meta["own_states"] for name in e["tensors"]} == {
        "onebit.worker_error", "onebit.server_error"}
    resumed = dp_tests.run_ranks(tool, cfg, model, 2, args=["--ckpt", str(ckpt), "--resume"],
                                 steps=12)
    assert resumed[0]["load"]["status"] == "ok"
    assert resumed[0]["losses"] == losses[4:]
    assert resumed[1]["losses"] == losses[4:]


@pytest.mark.parametrize("save_at", [5, 8, 9])
def test_zero_one_adam_resumes_bit_for_bit_between_synchronisations(tmp_path, tool, save_at):
    """0/1 Adam: step 5 exchanges a compressed gradient (before the variance
    freeze at 6: the ranks identical), step 8 synchronises (the ranks' weights
    joined up to each one's rounding), 9 is local (each rank's weights,
    momentum and accumulated steps its own until the next synchronisation).
    Resumed from a checkpoint at any of them, each rank continues bit for
    bit: its accumulator and learning-rate sum are in its own state, and past
    the freeze its weights and momentum too."""
    cfg, model = dp_tests.write_job(tmp_path, 0, 2, 1, 2, "zero_one")
    config = json.loads(cfg.read_text())
    config["optimizer"] = {"type": "ZeroOneAdam", "params": ZERO_ONE}
    cfg.write_text(json.dumps(config))
    ckpt = tmp_path / "ckpt"
    full = dp_tests.run_ranks(tool, cfg, model, 2, steps=ZERO_ONE_STEPS,
                              args=["--ckpt", str(ckpt), "--save-at", str(save_at),
                                    "--inspect", "1"])
    meta = json.loads((ckpt / (ckpt / "latest").read_text().strip() / "meta.json").read_text())
    for e in meta["own_states"]:
        parted = {"zero_one.params", "zero_one.exp_avg"} <= set(e["tensors"])
        assert "zero_one.accumulator" in e["tensors"] and "zero_one.lr_sum" in e["scalars"]
        assert parted == (save_at > ZERO_ONE["var_freeze_step"]), e
    resumed = dp_tests.run_ranks(tool, cfg, model, 2, steps=ZERO_ONE_STEPS,
                                 args=["--ckpt", str(ckpt), "--resume", "--inspect", "1"])
    for r, f in zip(resumed, full):
        assert r["load"]["status"] == "ok", r["load"]
        assert r["losses"] == f["losses"][save_at:]
        assert r["param_norms"] == f["param_norms"]


def test_zero_one_adam_ranks_agree_after_weights_are_loaded_between_synchronisations(tmp_path,
                                                                                   tool):
    """Weights loaded (dst_engine_load_weights) after the local step 9, when
    each rank's weights and accumulated steps are its own: the accumulated
    steps belonged to the weights the load replaced, so they start afresh
    (with the learning-rate sum and the error feedback; set_param restarts
    them over its tensor); the synchronisation at step 12 then joins the
    ranks up to each one's rounding. Kept, each
    rank's synchronisation would take its own accumulated steps back off the
    loaded weights and the ranks would stay apart by them for good."""
    cfg, model = dp_tests.write_job(tmp_path, 0, 2, 1, 2, "zero_one_load")
    config = json.loads(cfg.read_text())
    config["optimizer"] = {"type": "ZeroOneAdam", "params": ZERO_ONE}
    cfg.write_text(json.dumps(config))
    assert zero_one_kinds(ZERO_ONE, ZERO_ONE_STEPS)[8:] == ["local", "sync", "local", "sync"]
    ckpt = tmp_path / "ckpt"
    for load in (["--ckpt", str(ckpt), "--save-at", "5", "--load-weights-at", "9"],
                 ["--set-param-at", "9"]):  # one tensor, with set_param
        ranks = dp_tests.run_ranks(tool, cfg, model, 2, steps=ZERO_ONE_STEPS,
                                   args=load + ["--inspect", "1"])
        for r in ranks:
            assert all(r[key]["status"] == "ok" for key in ("save", "load_weights", "set_param")
                       if key in r), r
        norms = [np.array(r["param_norms"]) for r in ranks]
        assert np.max(np.abs(norms[0] - norms[1]) / norms[1]) < 1e-5, (load, norms)
        assert all(np.isfinite(r["losses"]).all() for r in ranks)


def refusal(dstrain_sdk, **keys):
    config = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
              "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 10}}}
    config.update(keys)
    with pytest.raises(dstrain_sdk.DstrainError) as e:
        dstrain_sdk.Engine(config, MODEL)
    return str(e.value)


def test_refusals_name_deepspeeds_reason(build_dir):
    os.environ["DSTRAIN_LIBRARY"] = str(build_dir / "libdstrain.so")
    sys.path.insert(0, str(REPO / "sdk-python" / "src"))
    import dstrain as sdk
    zero = refusal(sdk, zero_optimization={"stage": 2})
    assert "stage 2" in zero and "DeepSpeed refuses" in zero, zero
    both = refusal(sdk, gradient_compression={"enabled": True})
    assert "gradient_compression" in both, both
