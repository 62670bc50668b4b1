"""Shared harness of the pipeline tests: run a job's ranks through
pipeline_worker.py and compare them with the single-rank run.

A layout is (pp, dp, schedule, virtual stages, ZeRO stage, precision,
recomputation); the single-rank reference trains the same global batch
(micro x accumulation x dp) with the same seed. Every rank must report the
reference's losses and, after one more forward_backward, every tensor's
fingerprint (norm, sum, random projection) of parameters and gradients.
"""
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import test_data_parallel as dp_tests

HERE = Path(__file__).resolve().parent
WORKER = HERE / "pipeline_worker.py"
STEPS = 4
TIMEOUT = 240

# 8 layers in all (embedding, 6 blocks, head): enough for pp 4 x 2 virtual stages.
GPT = {"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 6, "n_head": 2,
       "d_model": 32, "seed": 11}
# The seeds' PipelineModule shape (Linear + ReLU stacks, MSE), scaled down.
SEQUENTIAL = {"type": "sequential", "input_dim": 32, "loss": "mse", "seed": 5,
              "layers": [{"type": "linear", "out_features": 32}, {"type": "relu"},
                         {"type": "linear", "out_features": 32}, {"type": "relu"},
                         {"type": "linear", "out_features": 32}, {"type": "relu"},
                         {"type": "linear", "out_features": 8}]}

# Worst relative difference allowed against the single-rank run: fp32
# everything; 16 bits the losses (the mixed-precision tests' bounds: 4 fp16
# roundings, 1 bf16 rounding) and the first gradients, before 16-bit weight
# updates drift apart (a tied wte sums two rounded copies; dp > 1 reduces in
# 16 bits; a few roundings of the largest element).
TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 4e-3}
GRAD_TOLERANCE = {"fp32": 1e-5, "fp16": 5e-3, "bf16": 3e-2}


def make_config(pp=1, dp=1, accum=4, micro=2, stage=0, schedule="1f1b", virtual=1,
                precision="fp32", recompute=False, partition="uniform", timeout=60, tp=1,
                sp=False):
    config = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": stage, "overlap_comm": True},
        "dstrain": {"num_threads": 1, "comm_timeout_seconds": timeout},
    }
    if pp > 1:
        config["pipeline"] = {"stages": pp, "schedule": schedule, "virtual_stages": virtual,
                              "partition_method": partition}
    if tp > 1:
        config["tensor_parallel"] = {"tp_size": tp}
        if sp:
            config["tensor_parallel"]["sequence_parallel"] = True
    if precision == "fp16":
        config["fp16"] = {"enabled": True, "initial_scale_power": 8}
    elif precision == "bf16":
        config["bf16"] = {"enabled": True}
    # recompute: True (every layer), an int k (DeepSpeed's
    # activation_checkpoint_interval: groups of k layers) or "selective".
    if recompute == "selective":
        config["activation_checkpointing"] = {"recompute_granularity": "selective"}
    elif recompute is not False:
        config["activation_checkpointing"] = {"partition_activations": False}
        if recompute is not True:
            config.setdefault("pipeline", {})["activation_checkpoint_interval"] = recompute
    return config


_references = {}


def reference(tmp_path, model, build_dir, accum, **kw):
    """The single-rank run of `model` with `accum` micro-batches per step and
    the config options `kw`, run once per test session."""
    key = (json.dumps(model, sort_keys=True), accum, tuple(sorted(kw.items())))
    if key not in _references:
        _references[key] = run_job(tmp_path, make_config(accum=accum, **kw), model, 1,
                                   "reference", build_dir=build_dir)[0]
    return _references[key]


def run_job(tmp_path, config, model, world, name, steps=STEPS, build_dir=None, extra=()):
    """Runs `world` ranks of the worker; returns their JSON reports by rank."""
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(config))
    spec = tmp_path / f"{name}_model.json"
    spec.write_text(json.dumps(model))
    port, token = dp_tests.free_port(), secrets.token_hex(8)
    procs = []
    for rank in range(world):
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        if build_dir is not None:
            env["DSTRAIN_LIBRARY"] = str(Path(build_dir) / "libdstrain.so")
        if world > 1:
            env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                        "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port), "DSTRAIN_JOB_TOKEN": token})
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(cfg), str(spec),
                                       str(steps), *extra], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    reports, failures = [], []
    for rank, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise AssertionError(f"{name}: rank {rank} did not finish in {TIMEOUT} s")
        if proc.returncode != 0:
            failures.append(f"rank {rank} exited {proc.returncode}: {err.strip()[-1500:]}")
        else:
            reports.append(json.loads(out.strip().splitlines()[-1]))
    assert not failures, f"{name}:\n" + "\n".join(failures)
    return sorted(reports, key=lambda r: r["rank"])


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-6)


def worst_difference(report, reference, kinds=("params", "grads", "first_grads"), losses=True):
    """(worst relative difference, where) over losses and the fingerprints of `kinds`."""
    worst = (0.0, "")
    if losses:
        for i, (a, b) in enumerate(zip(report["losses"], reference["losses"])):
            worst = max(worst, (relative(a, b), f"loss of step {i}"))
        worst = max(worst, (relative(report["fb_loss"], reference["fb_loss"]),
                            "forward_backward loss"))
    assert report["params"].keys() == reference["params"].keys()
    for kind in kinds:
        for name, prints in reference[kind].items():
            # The norm bounds the others' scale: a sum or projection near 0 is
            # compared against the tensor's norm, not against itself. Weights
            # are compared against at least 1: the key bias of attention has a
            # gradient that is 0 but for rounding (softmax ignores a shift of
            # every key), which Adam turns into lr-sized steps of any sign.
            scale = max(prints[0], 1.0 if kind == "params" else 1e-6)
            for a, b in zip(report[kind][name], prints):
                worst = max(worst, (abs(a - b) / scale, f"{kind} {name}"))
    return worst


def assert_equivalent(reports, reference, precision, what, trained_tolerance=None):
    """`trained_tolerance`: a bound of its own (fp32) for the tensors after the
    steps (params, grads); the losses and the first gradients keep 1e-5."""
    assert reports, what
    for report in reports:
        if precision == "fp32" and trained_tolerance is not None:
            checks = [(worst_difference(report, reference, kinds=("first_grads",)),
                       TOLERANCE["fp32"]),
                      (worst_difference(report, reference, kinds=("params", "grads"),
                                        losses=False), trained_tolerance)]
        elif precision == "fp32":
            checks = [(worst_difference(report, reference), TOLERANCE["fp32"])]
        else:
            checks = [(worst_difference(report, reference, kinds=()), TOLERANCE[precision]),
                      (worst_difference(report, reference, kinds=("first_grads",), losses=False),
                       GRAD_TOLERANCE[precision])]
        for (worst, where), bound in checks:
            assert worst <= bound, (
                f"{what}: rank {report['rank']} (stage {report['pp_rank']}) differs from the "
                f"single-rank run by {worst:.3g} (relative) at {where}; bound {bound}")
