"""Resuming from the optimizer's swap files after kill -9
(dstrain.resume_from_swap): every commit of the NVMe tier carries the
engine's step count and loss scaler, so a restarted job takes the newest
step every rank's file holds back — optimizer state, master weights, the
parameters rebuilt from them — and continues exactly as the uninterrupted
run (DeepSpeed's swap files are overwritten in place; only a checkpoint
brings its runs back).
"""
import json

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)
from test_offload import kill_mid_step, offload_job

STEPS = 10


def resumable_job(tmp_path, stage, precision, params=False):
    cfg, model = offload_job(tmp_path, stage, 2, "nvme", precision, pipeline=True)
    config = json.loads(cfg.read_text())
    config["dstrain"]["resume_from_swap"] = True
    if params:
        swap = tmp_path / "params"
        swap.mkdir(exist_ok=True)
        config["zero_optimization"]["stage3_param_persistence_threshold"] = 64
        config["zero_optimization"]["offload_param"] = {
            "device": "nvme", "nvme_path": str(swap), "max_in_cpu": 1000}
    cfg.write_text(json.dumps(config))
    return cfg, model


@pytest.mark.parametrize("stage,precision,params", [
    (1, "fp16", False), (2, "fp32", False), (3, "bf16", True),
])
def test_a_killed_run_resumes_from_its_swap_files_bit_for_bit(tmp_path, tool, stage, precision,
                                                              params):
    cfg, model = resumable_job(tmp_path, stage, precision, params)
    full = dp_tests.run_ranks(tool, cfg, model, 2, steps=STEPS)
    assert all(r["metrics"]["offload"]["optimizer"]["resumed_from_step"] == -1 for r in full)
    kill_mid_step(tool, cfg, model)
    left = sorted(f.name for f in (tmp_path / "swap_nvme").iterdir())
    assert left == ["dstrain_optimizer_rank0.swap", "dstrain_optimizer_rank1.swap"]
    resumed = dp_tests.run_ranks(tool, cfg, model, 2, steps=STEPS)
    for r in resumed:
        o = r["metrics"]["offload"]["optimizer"]
        # Seven steps were committed (fp16: minus those skipped on overflow).
        assert 0 < o["resumed_from_step"] <= 7
        assert len(r["losses"]) == STEPS - 7
        assert r["losses"] == full[0]["losses"][7:]
        assert o["committed_step"] == full[0]["metrics"]["offload"]["optimizer"]["committed_step"]
    assert list((tmp_path / "swap_nvme").iterdir()) == []  # the resumed run ended cleanly


def test_without_swap_files_the_run_starts_afresh(tmp_path, tool):
    cfg, model = resumable_job(tmp_path, 1, "bf16")
    plain, _ = offload_job(tmp_path, 1, 2, "plain", "bf16", pipeline=True)
    expected = dp_tests.run_ranks(tool, plain, model, 2, steps=4)
    run = dp_tests.run_ranks(tool, cfg, model, 2, steps=4)
    assert [r["losses"] for r in run] == [r["losses"] for r in expected]


def test_resume_from_swap_needs_the_optimizer_on_nvme(tmp_path, tool):
    cfg, model = offload_job(tmp_path, 1, 1, "resident", device=None)
    config = json.loads(cfg.read_text())
    config["dstrain"]["resume_from_swap"] = True
    cfg.write_text(json.dumps(config))
    code, _, err = dp_tests.start_ranks(tool, cfg, model, 1, steps=1)[0]
    assert code != 0 and "dstrain.resume_from_swap needs the optimizer's NVMe tier" in err, err


def test_a_resumed_run_already_past_steps_names_the_swap_files_not_a_checkpoint(tmp_path, tool):
    import os
    import pathlib
    import subprocess
    cfg, model = resumable_job(tmp_path, 1, "fp32")
    kill_mid_step(tool, cfg, model)
    dstrain = pathlib.Path(os.environ["DSTRAIN_BUILD_DIR"]) / "dstrain"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    run = subprocess.run(
        [str(dstrain), "launch", "--nproc-per-node", "2", "--master-port",
         str(dp_tests.free_port()), "--", str(dstrain), "train", "--config", str(cfg),
         "--model", str(model), "--steps", "2"],
        capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert "the NVMe swap files (dstrain.resume_from_swap) are already at step" in run.stderr, \
        run.stderr
    assert "--steps is 2: nothing to train" in run.stderr
    assert "checkpoint" not in run.stderr, run.stderr
