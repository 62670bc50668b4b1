"""gradient_compression with "target": "update" (ZeRO 0, two ranks): each rank
steps its own optimizer on its own gradients and the step's change to the
weights travels compressed with error feedback (Efficient-Adam's scheme).

The oracles: momentum SGD is linear in the gradients, so the mean of the
ranks' own steps (their own momentum buffers, which sum to the shared one)
is the plain data-parallel step: with top-k of every entry (lossless) the
run must follow the plain run to fp32 roundoff. A warm-up as long as the run
reduces plainly throughout: bit for bit the plain run. The lossy settings:
the payload bytes are the codec's sizes over the update's buckets, the
gradient all-reduce is gone, the ranks hold identical parameters, the start
copy and the residual are the two optimizer-state buffers `dstrain estimate`
counts, and the loss still falls.
"""
import json
import math
import pathlib
import subprocess

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture; build_dir is conftest's)

STEPS = 8
BUCKET = 20_000
SGD = {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}}


def run(tmp_path, tool, name, compression=None, optimizer=None, clipping=None, half=None,
        dp=2, grid=None):
    """grid: {"pipeline": ..., "tensor_parallel": ...} of a 2 x dp job."""
    cfg, model = dp_tests.write_job(tmp_path, 0, 2, 1, dp, name, overlap=True, bucket=BUCKET)
    config = json.loads(cfg.read_text())
    config.update(grid or {})
    if compression is not None:
        config["gradient_compression"] = compression
    if optimizer is not None:
        config["optimizer"] = optimizer
    if clipping is not None:
        config["gradient_clipping"] = clipping
    if half:  # "bf16", or "fp16" with dynamic loss scaling
        config[half] = {"enabled": True}
    cfg.write_text(json.dumps(config))
    world = dp * (2 if grid else 1)
    return dp_tests.run_ranks(tool, cfg, model, world, steps=STEPS, args=("--inspect", "1")), \
        cfg, model


def test_momentum_sgds_own_steps_average_to_the_plain_step(tmp_path, tool):
    plain, _, _ = run(tmp_path, tool, "plain", optimizer=SGD, clipping=0.0)
    update, _, _ = run(tmp_path, tool, "update",
                       {"algorithm": "topk", "topk_ratio": 1.0, "target": "update"},
                       optimizer=SGD, clipping=0.0)
    assert update[0]["param_norms"] == update[1]["param_norms"]
    assert update[0]["metrics"]["compression"]["target"] == "update"
    assert dp_tests.relative_gap(update[0]["losses"], plain[0]["losses"]) < 1e-5
    assert dp_tests.relative_gap(update[0]["param_norms"], plain[0]["param_norms"]) < 1e-5
    # The gradients never went through an all-reduce after the first step.
    assert update[0]["metrics"]["comm"]["allreduce"]["bytes"] < \
        plain[0]["metrics"]["comm"]["allreduce"]["bytes"] / 100


@pytest.mark.parametrize("grid", [{"pipeline": {"stages": 2}},
                                  {"tensor_parallel": {"autotp_size": 2}}],
                         ids=["pp2", "tp2"])
def test_each_data_parallel_group_of_a_grid_exchanges_its_own_slice(tmp_path, tool, grid):
    """dp 2 x pp 2 and dp 2 x tp 2: each (stage, slice) exchanges over its
    data-parallel group; the linear oracle holds rank by rank."""
    plain, _, _ = run(tmp_path, tool, "plain", optimizer=SGD, clipping=0.0, grid=grid)
    update, _, _ = run(tmp_path, tool, "update",
                       {"algorithm": "topk", "topk_ratio": 1.0, "target": "update"},
                       optimizer=SGD, clipping=0.0, grid=grid)
    for p, u in zip(plain, update):
        assert u["metrics"]["compression"]["buckets"] > 0
        if p["losses"]:
            assert dp_tests.relative_gap(u["losses"], p["losses"]) < 1e-5
        assert dp_tests.relative_gap(u["param_norms"], p["param_norms"]) < 1e-5


def test_a_warm_up_as_long_as_the_run_is_the_plain_run(tmp_path, tool):
    plain, _, _ = run(tmp_path, tool, "plain")
    warm, _, _ = run(tmp_path, tool, "warm",
                     {"algorithm": "1bit", "target": "update", "warmup_steps": STEPS + 1})
    for p, w in zip(plain, warm):
        assert w["losses"] == p["losses"]
        assert w["param_norms"] == p["param_norms"]
        assert w["metrics"]["compression"]["buckets"] == 0


def payload_bytes(algorithm, n, chunk, ratio=0.01):
    if algorithm == "topk":
        return 8 * max(1, math.ceil(ratio * n))
    return 4 * -(-n // chunk) + ((n + 7) // 8 + 3) // 4 * 4


@pytest.mark.parametrize("algorithm,chunk", [("1bit", 256), ("topk", 2048)])
def test_compressed_updates_send_the_codec_bytes_and_keep_ranks_equal(
        tmp_path, build_dir, tool, algorithm, chunk):  # noqa: F811
    plain, _, _ = run(tmp_path, tool, "plain")
    runs, cfg, model = run(tmp_path, tool, "update",
                           {"algorithm": algorithm, "target": "update", "chunk_size": chunk})
    assert runs[0]["param_norms"] == runs[1]["param_norms"]
    assert runs[0]["losses"] != plain[0]["losses"]
    assert runs[0]["losses"][-1] < runs[0]["losses"][0]
    assert dp_tests.relative_gap(runs[0]["losses"], plain[0]["losses"]) < 0.15
    psi = runs[0]["metrics"]["num_parameters"]
    sizes = [min(BUCKET, psi - b) for b in range(0, psi, BUCKET)]
    for r, p in zip(runs, plain):
        c = r["metrics"]["compression"]
        assert c["target"] == "update" and c["chunk_size"] == chunk
        assert c["buckets"] == STEPS * len(sizes)
        assert c["dense_bytes"] == STEPS * 4 * psi
        assert c["payload_bytes"] == STEPS * sum(payload_bytes(algorithm, n, chunk)
                                                 for n in sizes)
        assert c["gathered_bytes"] == 2 * c["payload_bytes"]
        comm = r["metrics"]["comm"]
        assert comm["allgather"]["bytes"] - p["metrics"]["comm"]["allgather"]["bytes"] == \
            c["gathered_bytes"]
        # Left of the all-reduce: scalars (the clipping norm, the loss).
        assert comm["allreduce"]["bytes"] < 4 * psi / 100
        # The start copy and the residual, each over the whole model.
        plain_state = p["metrics"]["memory"]["optimizer_state"]["bytes"]
        assert r["metrics"]["memory"]["optimizer_state"]["bytes"] == plain_state + 8 * psi
    stages = dp_tests.estimate_memory(build_dir, cfg, model, 2)
    assert stages[0]["optimizer_state_bytes"] == \
        runs[0]["metrics"]["memory"]["optimizer_state"]["bytes"]
    # Every rank keeps the whole optimizer: the sharded stages are not offered.
    assert [s["supported"] for s in stages] == [True, False, False, False]


@pytest.mark.parametrize("half", ["bf16", "fp16"])
def test_16_bit_training_exchanges_its_master_weights_update(tmp_path, tool, half):
    plain, _, _ = run(tmp_path, tool, "plain", half=half)
    update, _, _ = run(tmp_path, tool, "update", {"algorithm": "1bit", "target": "update"},
                       half=half)
    assert update[0]["param_norms"] == update[1]["param_norms"]
    assert update[0]["losses"][-1] < update[0]["losses"][0]
    assert dp_tests.relative_gap(update[0]["losses"], plain[0]["losses"]) < 0.1
    assert update[0]["metrics"]["compression"]["payload_ratio"] < 0.034


def compressed_job(tmp_path, name, compression):
    cfg, model = dp_tests.write_job(tmp_path, 0, 2, 1, 2, name, bucket=BUCKET)
    config = json.loads(cfg.read_text())
    config["gradient_compression"] = compression
    cfg.write_text(json.dumps(config))
    return cfg, model


def test_a_resumed_run_continues_bit_for_bit(tmp_path, tool):
    """Each rank's own moments and residual are in the checkpoint (its own
    state file): resumed in the same layout, the run continues exactly as the
    uninterrupted one."""
    cfg, model = compressed_job(tmp_path, "resume", {"algorithm": "1bit", "target": "update"})
    ckpt = tmp_path / "ckpt"
    full = dp_tests.run_ranks(tool, cfg, model, 2, args=["--ckpt", str(ckpt), "--save-at", "4",
                                                         "--inspect", "1"], steps=STEPS)
    assert all(r["save"]["status"] == "ok" for r in full)
    meta = json.loads((ckpt / (ckpt / "latest").read_text().strip() / "meta.json").read_text())
    assert [e["file"] for e in meta["own_states"]] == \
        ["own_state_rank_0.safetensors", "own_state_rank_1.safetensors"]
    assert set(meta["own_states"][1]["tensors"]) == {
        "update_compression.residual", "update_compression.exp_avg",
        "update_compression.exp_avg_sq"}
    resumed = dp_tests.run_ranks(tool, cfg, model, 2, args=["--ckpt", str(ckpt), "--resume",
                                                            "--inspect", "1"], steps=STEPS)
    for r, f in zip(resumed, full):
        assert r["load"]["status"] == "ok", r["load"]
        assert r["losses"] == f["losses"][4:]
        assert r["param_norms"] == f["param_norms"]
    # `dstrain ckpt inspect` shows them and verifies their files.
    cli = str(pathlib.Path(tool).parent.parent / "dstrain")
    shown = subprocess.run([cli, "ckpt", "inspect", str(ckpt)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "each rank's own state" in shown.stdout
    assert "own_state_rank_1.safetensors  update_compression.exp_avg [" in shown.stdout
    raw = json.loads(subprocess.run([cli, "ckpt", "inspect", str(ckpt), "--json"],
                                    capture_output=True, text=True).stdout)
    assert raw["own_states"] == meta["own_states"] and raw["valid"]


def test_a_flipped_byte_in_a_ranks_own_state_is_named_and_changes_nothing(tmp_path, tool):
    cfg, model = compressed_job(tmp_path, "flip", {"algorithm": "1bit", "target": "update"})
    ckpt = tmp_path / "ckpt"
    dp_tests.run_ranks(tool, cfg, model, 2, args=["--ckpt", str(ckpt), "--save-at", "4"],
                       steps=STEPS)
    victim = ckpt / (ckpt / "latest").read_text().strip() / "own_state_rank_1.safetensors"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x10
    victim.write_bytes(bytes(data))
    resumed = dp_tests.run_ranks(tool, cfg, model, 2, args=["--ckpt", str(ckpt), "--resume"],
                                 steps=STEPS)
    for r in resumed:  # every rank refuses: nothing was loaded, training starts from step 0
        assert r["load"]["status"] != "ok"
        assert "own_state_rank_1.safetensors" in r["load"]["error"], r["load"]
        assert len(r["losses"]) == STEPS


def test_another_codec_resumes_from_rank_zeros_moments(tmp_path, tool):
    """Loaded with other compression settings, the saved residuals and own
    moments no longer mean the same: every rank starts from rank 0's moments
    and a zero residual, the ranks stay identical and the run continues close
    to the uninterrupted one."""
    cfg, model = compressed_job(tmp_path, "saved", {"algorithm": "1bit", "target": "update"})
    ckpt = tmp_path / "ckpt"
    full = dp_tests.run_ranks(tool, cfg, model, 2, args=["--ckpt", str(ckpt), "--save-at", "4"],
                              steps=STEPS)
    cfg2, _ = compressed_job(tmp_path, "loaded", {"algorithm": "1bit", "target": "update",
                                                  "chunk_size": 256})
    resumed = dp_tests.run_ranks(tool, cfg2, model, 2, args=["--ckpt", str(ckpt), "--resume",
                                                             "--inspect", "1"], steps=STEPS)
    for r in resumed:
        assert r["load"]["status"] == "ok", r["load"]
        assert len(r["losses"]) == STEPS - 4
    assert resumed[0]["param_norms"] == resumed[1]["param_norms"]
    assert resumed[0]["losses"] != full[0]["losses"][4:]
    assert dp_tests.relative_gap(resumed[0]["losses"], full[0]["losses"][4:]) < 0.02


def test_one_rank_has_no_update_to_exchange(tmp_path, tool):
    plain, _, _ = run(tmp_path, tool, "plain", dp=1)
    one, _, _ = run(tmp_path, tool, "update", {"algorithm": "1bit", "target": "update"}, dp=1)
    assert one[0]["losses"] == plain[0]["losses"]
    assert one[0]["metrics"]["compression"]["buckets"] == 0
