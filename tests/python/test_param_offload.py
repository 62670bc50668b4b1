"""ZeRO-3 parameter offload to NVMe (zero_optimization.offload_param.device
"nvme"): each rank keeps the first max_in_cpu elements of its parameter
shard in memory and the rest in a swap file, read a layer ahead of its
gather into buffer_count windows and rewritten by every optimizer step.

Oracle: the offloaded run reproduces the resident ZeRO-3 run's losses bit
for bit (the same arithmetic on the same numbers; only where the shard rests
differs), with and without the optimizer's NVMe tier, fp32 / fp16 / bf16,
dp 1 and 2; the memory the shard leaves is measured, and checkpoints move
between offloaded and resident runs.
"""
import json
import os

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)
from test_offload import estimated_model_state, kill_mid_step, losses, offload_job

STEPS = 5


def param_job(tmp_path, dp, name, precision="fp32", max_in_cpu=0, buffers=5, optimizer=False,
              prefetch=None, buffer_size=None):
    cfg, model = offload_job(tmp_path, 3, dp, name, precision,
                             device="nvme" if optimizer else None)
    config = json.loads(cfg.read_text())
    zero = config["zero_optimization"]
    # The tiny model's matrices are partitioned and gathered a layer at a
    # time (DeepSpeed's default keeps every tensor below 1e5 elements whole).
    zero["stage3_param_persistence_threshold"] = 64
    if prefetch is not None:
        zero["stage3_prefetch_bucket_size"] = prefetch
    if max_in_cpu is not None:
        swap = tmp_path / f"params_{name}"
        swap.mkdir(exist_ok=True)
        zero["offload_param"] = {"device": "nvme", "nvme_path": str(swap), "buffer_count": buffers,
                                 "max_in_cpu": max_in_cpu, "pin_memory": True}
        if buffer_size is not None:
            zero["offload_param"]["buffer_size"] = buffer_size
    cfg.write_text(json.dumps(config))
    return cfg, model


@pytest.mark.parametrize("dp,precision,max_in_cpu,buffers,optimizer,prefetch", [
    (1, "fp32", 0, 5, False, None),
    (2, "fp32", 0, 2, True, 0),
    (2, "bf16", 3000, 5, False, None),
    (1, "fp16", 0, 1, True, None),
    (2, "fp16", 0, 3, False, 0),
])
def test_offloaded_parameters_reproduce_the_resident_run_bit_for_bit(
        tmp_path, tool, dp, precision, max_in_cpu, buffers, optimizer, prefetch):
    cfg, model = param_job(tmp_path, dp, "resident", precision, max_in_cpu=None, prefetch=prefetch)
    resident = dp_tests.run_ranks(tool, cfg, model, dp, steps=STEPS)
    cfg, model = param_job(tmp_path, dp, "nvme", precision, max_in_cpu, buffers, optimizer,
                           prefetch)
    offloaded = dp_tests.run_ranks(tool, cfg, model, dp, steps=STEPS)
    assert losses(offloaded) == losses(resident)
    element = 4 if precision == "fp32" else 2
    for r, base in zip(offloaded, resident):
        m, p = r["metrics"], r["metrics"]["offload"]["param"]
        assert p["device"] == "nvme" and p["moved"] and p["committed_step"] == STEPS
        assert p["resident_elements"] == max_in_cpu and p["swapped_elements"] > 0
        assert p["windows"] == buffers and p["short_transfers"] == 0
        # The shard leaves memory: parameters shrink by exactly the swapped elements.
        saved = base["metrics"]["memory"]["parameters"]["bytes"] - m["memory"]["parameters"]["bytes"]
        assert saved == p["swapped_elements"] * element
        # Every step rewrites the swapped shard (so did the start); every
        # forward and backward reads it back.
        assert p["write_bytes"] >= p["swapped_elements"] * element * (STEPS + 1)
        assert p["read_bytes"] >= p["swapped_elements"] * element * STEPS
    assert list((tmp_path / "params_nvme").iterdir()) == []  # removed on a clean shutdown


def test_the_swapped_parameters_are_read_ahead_into_the_windows(tmp_path, tool):
    """With five windows the layers' shares are read before their gather:
    the step waits on far fewer reads than it makes."""
    cfg, model = param_job(tmp_path, 1, "nvme", "bf16")
    r = dp_tests.run_ranks(tool, cfg, model, 1, steps=STEPS)[0]
    p = r["metrics"]["offload"]["param"]
    assert p["requests"] > 0 and p["io_wait_seconds"] >= 0
    assert r["metrics"]["memory"]["offload"]["bytes"] == p["buffer_bytes"]


@pytest.mark.parametrize("precision,offload_saves", [("bf16", True), ("fp32", False),
                                                     ("fp32", True)])
def test_checkpoints_move_between_offloaded_and_resident_parameters(tmp_path, tool, precision,
                                                                     offload_saves):
    ckpt = tmp_path / "ckpt"
    cfg, model = param_job(tmp_path, 2, "saver", precision,
                           max_in_cpu=0 if offload_saves else None, optimizer=offload_saves)
    full = dp_tests.run_ranks(tool, cfg, model, 2, steps=8,
                              args=["--ckpt", str(ckpt), "--save-at", "4"])
    assert all(r["save"]["status"] == "ok" for r in full), full[0]["save"]
    cfg, model = param_job(tmp_path, 2, "loader", precision,
                           max_in_cpu=None if offload_saves else 0)
    resumed = dp_tests.run_ranks(tool, cfg, model, 2, steps=8,
                                 args=["--ckpt", str(ckpt), "--resume"])
    for r in resumed:
        assert r["load"]["status"] == "ok", r["load"]
        assert r["losses"] == full[0]["losses"][4:]


def test_a_buffer_size_below_a_layers_share_is_named(tmp_path, tool):
    cfg, model = param_job(tmp_path, 1, "small", buffer_size=100)
    code, _, err = dp_tests.start_ranks(tool, cfg, model, 1, steps=1)[0]
    assert code != 0
    assert "offload_param.buffer_size is 100 elements" in err and "raise buffer_size" in err


def test_offloading_parameters_below_stage_3_is_refused(tmp_path, tool):
    cfg, model = param_job(tmp_path, 1, "stage2")
    config = json.loads(cfg.read_text())
    config["zero_optimization"]["stage"] = 2
    cfg.write_text(json.dumps(config))
    code, _, err = dp_tests.start_ranks(tool, cfg, model, 1, steps=1)[0]
    assert code != 0 and "offloading parameters needs ZeRO stage 3" in err


@pytest.mark.parametrize("dp,precision,max_in_cpu,optimizer", [
    (1, "fp32", 0, False), (2, "bf16", 3000, True), (2, "fp32", 5000, True), (2, "fp16", 0, False),
])
def test_the_estimate_counts_the_swap_buffers_to_the_byte(tmp_path, tool, build_dir, dp, precision,
                                                          max_in_cpu, optimizer):
    cfg, model = param_job(tmp_path, dp, "nvme", precision, max_in_cpu, buffers=3,
                           optimizer=optimizer)
    run = dp_tests.run_ranks(tool, cfg, model, dp, steps=1)
    expected = estimated_model_state(build_dir, cfg, model, dp)
    for r in run:
        mem = {k: v["bytes"] for k, v in r["metrics"]["memory"].items()}
        assert mem["parameters"] + mem["gradients"] + mem["optimizer_state"] + mem["offload"] \
            == expected, mem


def test_a_zero3_model_whose_states_exceed_the_memory_budget_trains_with_both_tiers_on_nvme(
        tmp_path, tool):
    """bf16 ZeRO 3 on one rank, the 12.7M-parameter GPT (261 MiB resident;
    138 MiB offloaded): with the optimizer
    tier and the parameter shard on NVMe it trains under a memory limit that
    kills the resident run, with the resident run's losses."""
    if "ASAN_OPTIONS" in os.environ:  # scripts/test-sanitizers.sh
        pytest.skip("a memory budget means nothing under AddressSanitizer: its shadow memory "
                    "and quarantine outgrow the 180 MiB limit")
    from test_offload import BIG, memory_cgroup, run_in_cgroup
    model = tmp_path / "big.json"
    model.write_text(json.dumps(BIG))
    cfg_resident, _ = param_job(tmp_path, 1, "resident", "bf16", max_in_cpu=None)
    cfg_nvme, _ = param_job(tmp_path, 1, "nvme", "bf16", max_in_cpu=0, buffers=2, optimizer=True)
    for cfg in (cfg_resident, cfg_nvme):
        config = json.loads(cfg.read_text())
        zero = config["zero_optimization"]
        zero["stage3_param_persistence_threshold"] = 100000  # DeepSpeed's default
        zero["sub_group_size"] = 1_000_000
        if "offload_optimizer" in zero:
            zero["offload_optimizer"]["buffer_count"] = 2
        cfg.write_text(json.dumps(config))
    free_run = dp_tests.run_ranks(tool, cfg_resident, model, 1, steps=3)[0]
    limit = 180 << 20  # the offloaded run peaks near 138 MiB resident, the resident run 261
    cgroup = memory_cgroup("param_offload", limit)
    cmd = lambda cfg: [tool, "--model", str(model), "--config", str(cfg), "--steps", "3"]
    if cgroup is None:  # no cgroup here: the offloaded run's resident size is far below
        run = dp_tests.run_ranks(tool, cfg_nvme, model, 1, steps=3)[0]
        assert run["losses"] == free_run["losses"]
        assert run["metrics"]["process_rss_bytes"] < free_run["metrics"]["process_rss_bytes"] \
            - (100 << 20)
        return
    try:
        offloaded = run_in_cgroup(cgroup, cmd(cfg_nvme))
        assert offloaded.returncode == 0, offloaded.stderr
        run = json.loads(offloaded.stdout.strip().splitlines()[-1])
        assert run["losses"] == free_run["losses"]
        assert run["metrics"]["offload"]["param"]["swapped_elements"] > 0
        with open("/proc/meminfo") as f:
            swap = [int(line.split()[1]) for line in f if line.startswith("SwapTotal")][0]
        if swap == 0:  # with swap the resident run could page instead of dying
            resident = run_in_cgroup(cgroup, cmd(cfg_resident))
            assert resident.returncode != 0, "the resident run fit in the limit: raise the model"
    finally:
        os.rmdir(cgroup)


@pytest.mark.parametrize("name", ["ds_config_zero_infinity.json", "ds_config_zero_offload.json"])
def test_the_example_offload_configs_train_as_written(tmp_path, build_dir, name):
    """examples/offload: ZeRO-Infinity (both tiers on NVMe) and the tutorials'
    ZeRO-Offload (optimizer "cpu", parameters "nvme") train the default GPT
    from the command line; only nvme_path is pointed at a temporary directory."""
    import pathlib
    import re

    import test_cli as cli_tests
    written = pathlib.Path(__file__).resolve().parents[2] / "examples" / "offload" / name
    swap = tmp_path / "nvme"
    swap.mkdir()
    cfg = tmp_path / name
    cfg.write_text(written.read_text().replace("/local_nvme", str(swap)))
    result = cli_tests.run(build_dir / "dstrain", "train", "--config", cfg, "--steps", "6",
                           "--eval-interval", "3", "--eval-batches", "2")
    assert result.returncode == 0, result.stderr
    losses = [float(v) for v in re.findall(r"val loss ([0-9.]+)", result.stdout)]
    assert len(losses) >= 2 and losses[-1] < losses[0], result.stdout
    assert list(swap.iterdir()) == []  # the swap files go with a clean shutdown


def test_a_run_killed_mid_step_resumes_from_its_last_checkpoint(tmp_path, tool):
    """kill -9 of both ranks while rank 0 is inside step 8 (waiting in a
    collective for rank 1): the swap files stay behind, locked by nobody; the
    next run recreates them and, loading the last checkpoint, continues
    exactly as the uninterrupted run (ZeRO 3, bf16, both tiers on NVMe)."""
    cfg, model = param_job(tmp_path, 2, "nvme", "bf16", max_in_cpu=2000, optimizer=True)
    ckpt = tmp_path / "ckpt"
    full = dp_tests.run_ranks(tool, cfg, model, 2, steps=10,
                              args=["--ckpt", str(tmp_path / "ckpt_full"), "--save-at", "4"])
    kill_mid_step(tool, cfg, model, args=("--ckpt", str(ckpt), "--save-at", "4"))
    left = sorted(f.name for d in ("params_nvme", "swap_nvme") for f in (tmp_path / d).iterdir())
    assert left == ["dstrain_optimizer_rank0.swap", "dstrain_optimizer_rank1.swap",
                    "dstrain_params_rank0.swap", "dstrain_params_rank1.swap"]
    resumed = dp_tests.run_ranks(tool, cfg, model, 2, steps=10, args=["--ckpt", str(ckpt),
                                                                       "--resume"])
    for r in resumed:
        assert r["load"]["status"] == "ok", r["load"]
        assert r["losses"] == full[0]["losses"][4:]


@pytest.mark.test_hooks
@pytest.mark.parametrize("precision,kind", [("fp32", "write-error"), ("bf16", "read-error")])
def test_a_failed_step_leaves_the_swapped_parameters_as_before(tmp_path, tool, precision, kind):
    """An I/O error in the optimizer tier mid-step (injected at step 3, piece
    2) aborts the parameters' write pass too: the step changes nothing, and
    retried it gives the resident run's losses bit for bit."""
    cfg, model = param_job(tmp_path, 1, "resident", precision, max_in_cpu=None)
    resident = dp_tests.run_ranks(tool, cfg, model, 1, steps=5)[0]["losses"]
    cfg, model = param_job(tmp_path, 1, "nvme", precision, max_in_cpu=1000, optimizer=True)
    code, out, err = dp_tests.start_ranks(tool, cfg, model, 1, steps=5,
                                          args=("--retry-failed", "1"),
                                          extra_env={"DSTRAIN_INJECT_IO_FAULT": f"0:3:2:{kind}"})[0]
    assert code == 0, err
    assert "optimizer step 3 failed; nothing changed" in err, err
    run = json.loads(out.strip().splitlines()[-1])
    assert run["losses"] == resident
    assert run["metrics"]["offload"]["param"]["committed_step"] == 5
