"""Data parallelism and ZeRO: every layout reproduces the single-rank run.

Each rank is a separate process started with torchrun's environment contract
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, DSTRAIN_JOB_TOKEN),
running tests/tools/dst_dp_tool, which trains on its slice of each global
batch. Losses must match the single-rank losses within 1e-5 relative, and the
per-rank model-state memory must equal the ZeRO paper's formulas.
"""
import json
import os
import secrets
import socket
import subprocess

import pytest

MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 2, "n_head": 2,
         "d_model": 32, "seed": 11}
STEPS = 20
TIMEOUT = 180


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_job(tmp_path, stage, micro, accum, dp, name, overlap=False, bucket=None):
    config = {
        "train_batch_size": micro * accum * dp,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95],
                                                  "weight_decay": 0.1}},
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": stage, "overlap_comm": overlap},
        "dstrain": {"num_threads": 1, "comm_timeout_seconds": 60},
    }
    if bucket:
        config["zero_optimization"]["reduce_bucket_size"] = bucket
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(config))
    model = tmp_path / "model.json"
    model.write_text(json.dumps(MODEL))
    return cfg, model


def run_ranks(tool, cfg, model, world_size, extra_env=None):
    port = free_port()
    token = secrets.token_hex(8)
    procs = []
    for rank in range(world_size):
        env = dict(os.environ)
        env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
        if world_size > 1:
            env.update({"RANK": str(rank), "WORLD_SIZE": str(world_size),
                        "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world_size),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                        "DSTRAIN_JOB_TOKEN": token})
        env.update(extra_env or {})
        procs.append(subprocess.Popen(
            [tool, "--model", str(model), "--config", str(cfg), "--steps", str(STEPS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT)
            assert p.returncode == 0, f"rank failed ({p.returncode}): {err}"
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return sorted(results, key=lambda r: r["rank"])


@pytest.fixture(scope="module")
def tool(build_dir):
    path = os.path.join(build_dir, "tests", "dst_dp_tool")
    assert os.path.exists(path), f"{path} is missing: build the dst_dp_tool target"
    return path


def relative_gap(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


GLOBAL_BATCHES = [(2, 8), (2, 16)]  # (micro, global samples): accumulation 1 and 2 at dp 4


@pytest.mark.parametrize("stage", [0, 1])
@pytest.mark.parametrize("micro,global_batch", GLOBAL_BATCHES)
def test_every_dp_layout_reproduces_single_rank(tmp_path, tool, stage, micro, global_batch):
    single_cfg, model = write_job(tmp_path, 0, micro, global_batch // micro, 1, "single")
    reference = run_ranks(tool, single_cfg, model, 1)[0]["losses"]
    assert len(reference) == STEPS and reference[-1] < reference[0]
    for dp in (2, 4):
        accum = global_batch // (micro * dp)
        cfg, _ = write_job(tmp_path, stage, micro, accum, dp, f"s{stage}_dp{dp}",
                           overlap=(dp == 2), bucket=1000)
        results = run_ranks(tool, cfg, model, dp)
        for r in results:
            gap = relative_gap(r["losses"], reference)
            assert gap < 1e-5, (f"stage {stage} dp {dp} accum {accum} rank {r['rank']}: "
                                f"losses differ by {gap:.2e} relative\n{r['losses']}\nvs\n"
                                f"{reference}")


@pytest.mark.parametrize("stage,dp", [(0, 2), (1, 2), (1, 4)])
def test_model_state_memory_matches_zero_formulas(tmp_path, tool, stage, dp):
    cfg, model = write_job(tmp_path, stage, 2, 1, dp, f"mem{stage}{dp}")
    for r in run_ranks(tool, cfg, model, dp):
        m = r["metrics"]
        psi = m["num_parameters"]
        padded = -(-psi // dp) * dp  # dstrain pads the flat buffers to a multiple of dp
        assert padded - psi < dp
        mem = {k: v["bytes"] for k, v in m["memory"].items()}
        assert mem["parameters"] == 4 * padded
        assert mem["gradients"] == 4 * padded
        expected_optimizer = 8 * padded if stage == 0 else 8 * padded // dp
        assert mem["optimizer_state"] == expected_optimizer
        model_state = mem["parameters"] + mem["gradients"] + mem["optimizer_state"]
        formula = 16 * psi if stage == 0 else 8 * psi + 8 * psi / dp  # ZeRO paper, fp32 AdamW
        assert abs(model_state - formula) / formula < 0.01
