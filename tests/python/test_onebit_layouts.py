"""1-bit Adam with pipeline parallelism (DeepSpeed's NCCL-backend 1-bit
optimizers run with pipelines): each stage's data-parallel group exchanges
its own tensors' momenta per tensor, so a 2-stage pipeline over 2 data-
parallel ranks follows the 1-stage run of the same 2 ranks past the freeze
point. One micro-batch per rank keeps the gradients the same bits in both
layouts (the tied embedding's two halves are summed once either way); the
1-bit signs then only see rounding differences, which the bound allows."""
import json
import os
import re
import subprocess

import pytest

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "configs")
STEPS = 10


def losses(build_dir, tmp_path, name, world, extra):
    config = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
              "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-4, "freeze_step": 3}},
              "steps_per_print": 1, "dstrain": {"num_threads": 1}}
    config.update(extra)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    dstrain = str(build_dir / "dstrain")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([dstrain, "launch", "--nproc-per-node", str(world), "--", dstrain,
                          "train", "--config", str(path), "--model",
                          os.path.join(CONFIGS, "gpt_tiny.json"), "--steps", str(STEPS)],
                         capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found = [float(x) for x in re.findall(r"^step +\d+/\d+ +loss ([\d.]+)", out.stdout, re.M)]
    assert len(found) == STEPS, out.stdout
    return found


def test_onebit_adam_with_a_pipeline_follows_the_data_parallel_run(build_dir, tmp_path):
    flat = losses(build_dir, tmp_path, "flat", 2, {})
    piped = losses(build_dir, tmp_path, "piped", 4, {"pipeline": {"stages": 2}})
    assert piped[:4] == flat[:4]  # Adam up to the freeze: the same losses to the printed digits
    for p, f in zip(piped, flat):
        assert abs(p - f) <= 1e-3 * abs(f), (piped, flat)
    assert piped[-1] < piped[0]
