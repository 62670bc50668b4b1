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

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)
from test_offload import offload_job, losses

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
