"""fp16 and bf16 mixed precision: 16-bit layouts track the fp32 single-rank
run, model-state memory is the ZeRO paper's 2 + 2 + 12 bytes per parameter,
an overflow on one rank skips that step on every rank, and checkpoints move
between precisions and layouts.

Tolerances (relative loss gap to the fp32 single-rank run over 20 AdamW
steps). Parameters, activations and gradients are rounded to 16 bits, so each
is off by up to one unit roundoff u (fp16: 2^-11 = 4.9e-4; bf16: 2^-8 = 3.9e-3)
relative; the loss, a mean over 128 tokens, averages these errors, and the fp32
master weights keep them from compounding across steps. Observed here: fp16
3e-4, bf16 7e-4. Bounds: fp16 2e-3 (4 u), bf16 4e-3 (1 u).
fp16 runs start at scale 2^8 so that no step overflows (an overflow skips the
step and the trajectory then differs from fp32's by design; that path has its
own test).
"""
import json

import pytest

from test_data_parallel import (relative_gap, run_ranks, start_ranks, tool,  # noqa: F401
                                write_job, zero_options)

TOLERANCE = {"fp16": 2e-3, "bf16": 4e-3, "fp32": 1e-5}
STEPS = 20


def precision_job(tmp_path, precision, stage, dp, name, comm=None, fp16_extra=None, steps=None):
    options = zero_options(stage, dp) if dp > 1 else {}
    cfg, model = write_job(tmp_path, stage, 2, 4 // dp, dp, name, **options)
    config = json.loads(cfg.read_text())
    if precision == "fp16":
        config["fp16"] = {"enabled": True, "initial_scale_power": 8, **(fp16_extra or {})}
    elif precision == "bf16":
        config["bf16"] = {"enabled": True}
    if comm:
        config["communication_data_type"] = comm
    cfg.write_text(json.dumps(config))
    return cfg, model


@pytest.fixture(scope="module")
def fp32_reference(tmp_path_factory, tool):
    tmp = tmp_path_factory.mktemp("fp32_ref")
    cfg, model = precision_job(tmp, "fp32", 0, 1, "ref")
    return run_ranks(tool, cfg, model, 1)[0]["losses"]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("dp", [1, 2])
def test_16bit_layouts_track_the_fp32_run(tmp_path, tool, fp32_reference, precision, stage, dp):
    cfg, model = precision_job(tmp_path, precision, stage, dp, "run")
    for r in run_ranks(tool, cfg, model, dp):
        m = r["metrics"]
        assert m["precision"] == precision and m["skipped_steps"] == 0
        gap = relative_gap(r["losses"], fp32_reference)
        assert gap < TOLERANCE[precision], (gap, r["losses"][-3:], fp32_reference[-3:])
        assert r["losses"] != fp32_reference  # 16-bit rounding is really applied


@pytest.mark.parametrize("precision,stage", [("fp16", 2), ("bf16", 0), ("bf16", 3)])
def test_reducing_gradients_in_fp32_tracks_too(tmp_path, tool, fp32_reference, precision, stage):
    cfg, model = precision_job(tmp_path, precision, stage, 2, "comm32", comm="fp32")
    for r in run_ranks(tool, cfg, model, 2):
        assert relative_gap(r["losses"], fp32_reference) < TOLERANCE[precision]


@pytest.mark.parametrize("precision,stage,comm", [("fp16", 0, None), ("bf16", 1, None),
                                                  ("fp16", 1, "fp32")])
def test_16bit_overlapped_reduction_equals_the_serial_one(tmp_path, tool, precision, stage, comm):
    """ZeRO 0/1 under 16 bits reduce their buckets during the last backward
    with overlap_comm, as fp32 does: the same buckets summed in the same
    order, so every rank's losses equal the non-overlapped run's bit for bit."""
    runs = {}
    for overlap in (False, True):
        cfg, model = precision_job(tmp_path, precision, stage, 2, f"ov{int(overlap)}", comm=comm)
        config = json.loads(cfg.read_text())
        config["zero_optimization"]["overlap_comm"] = overlap
        cfg.write_text(json.dumps(config))
        runs[overlap] = [r["losses"] for r in run_ranks(tool, cfg, model, 2)]
    assert runs[True] == runs[False]


@pytest.mark.parametrize("stage,dp", [(0, 2), (1, 2), (2, 2), (3, 2), (3, 4)])
def test_model_state_memory_is_2_2_12_bytes_per_parameter(tmp_path, build_dir, tool, stage, dp):
    cfg, model = precision_job(tmp_path, "fp16", stage, dp, "mem")
    from test_data_parallel import MODEL, PERSISTENCE, estimate_memory, persistent_elements
    persistent = persistent_elements(MODEL, PERSISTENCE) if stage == 3 else 0
    if stage == 3:
        assert persistent > 0
    estimate = estimate_memory(build_dir, cfg, model, dp)[stage]
    for r in run_ranks(tool, cfg, model, dp, steps=1):
        m = r["metrics"]
        psi = m["num_parameters"]
        padded = -(-psi // dp) * dp
        shard = padded // dp
        mem = {k: v["bytes"] for k, v in m["memory"].items()}
        # Stage 3 keeps the tensors under stage3_param_persistence_threshold
        # whole on every rank, in 16 bits, as the fp32 path does.
        assert mem["parameters"] == 2 * (shard + persistent if stage == 3 else padded)
        assert mem["gradients"] == 2 * (shard if stage >= 2 else padded)
        assert mem["optimizer_state"] == 12 * (padded if stage == 0 else shard)
        assert (mem["parameters"], mem["gradients"], mem["optimizer_state"]) == (
            estimate["parameters_bytes"], estimate["gradients_bytes"],
            estimate["optimizer_state_bytes"])
        # The ZeRO paper's Table 1 formulas with K = 12.
        formula = {0: 16 * psi, 1: 4 * psi + 12 * psi / dp, 2: 2 * psi + 14 * psi / dp,
                   3: 16 * psi / dp}[stage] + 2 * persistent
        total = mem["parameters"] + mem["gradients"] + mem["optimizer_state"]
        assert abs(total - formula) / formula < 0.01


@pytest.mark.test_hooks
def test_an_overflow_on_one_rank_skips_that_step_on_every_rank(tmp_path, tool):
    """Rank 1's gradients overflow in step 3 (DSTRAIN_INJECT_GRAD_OVERFLOW):
    both ranks skip exactly that step, the scale halves (hysteresis 1), the
    LR schedule does not advance, and the run equals a one-rank run with the
    same overflow."""
    extra = {"hysteresis": 1}
    cfg, model = precision_job(tmp_path, "fp16", 1, 2, "inject", fp16_extra=extra)
    plain = run_ranks(tool, cfg, model, 2, steps=8)
    hit = run_ranks(tool, cfg, model, 2, steps=8,
                    extra_env={"DSTRAIN_INJECT_GRAD_OVERFLOW": "1:3"})
    for r in hit:
        assert r["metrics"]["skipped_steps"] == 1
        assert r["metrics"]["loss_scale"] == 128.0  # 2^8 halved once
        assert r["metrics"]["step"] == 8
        assert r["losses"][:4] == plain[0]["losses"][:4]  # identical up to the overflow
        assert r["losses"][4:] != plain[0]["losses"][4:]  # one update fewer afterwards
    for r in plain:
        assert r["metrics"]["skipped_steps"] == 0 and r["metrics"]["loss_scale"] == 256.0
    one_cfg, _ = precision_job(tmp_path, "fp16", 1, 1, "inject1", fp16_extra=extra)
    single = run_ranks(tool, one_cfg, model, 1, steps=8,
                       extra_env={"DSTRAIN_INJECT_GRAD_OVERFLOW": "0:3"})[0]
    assert single["metrics"]["skipped_steps"] == 1
    assert relative_gap(hit[0]["losses"], single["losses"]) < TOLERANCE["fp16"]


@pytest.mark.test_hooks
def test_overflow_at_the_minimum_scale_is_a_clear_error(tmp_path, tool):
    extra = {"hysteresis": 1, "initial_scale_power": 0, "min_loss_scale": 1}
    cfg, model = precision_job(tmp_path, "fp16", 0, 1, "floor", fp16_extra=extra)
    (code, _, err), = start_ranks(tool, cfg, model, 1, steps=4,
                                  extra_env={"DSTRAIN_INJECT_GRAD_OVERFLOW": "0:1"})
    assert code != 0
    assert "minimum loss scale" in err and "min_loss_scale" in err, err


@pytest.mark.test_hooks
def test_a_malformed_injection_variable_is_refused(tmp_path, tool):
    cfg, model = precision_job(tmp_path, "fp16", 0, 1, "bad")
    (code, _, err), = start_ranks(tool, cfg, model, 1, steps=1,
                                  extra_env={"DSTRAIN_INJECT_GRAD_OVERFLOW": "one"})
    assert code != 0 and "DSTRAIN_INJECT_GRAD_OVERFLOW" in err


# (precision, dp, stage) saved -> loaded.
PRECISION_RESHARD = [
    (("fp16", 2, 2), ("fp32", 1, 0)),
    (("fp32", 4, 3), ("bf16", 2, 1)),
    (("bf16", 2, 3), ("fp16", 1, 0)),
    (("fp16", 4, 1), ("fp16", 2, 3)),
]


@pytest.mark.parametrize("saved,loaded", PRECISION_RESHARD,
                         ids=[f"{a}-dp{b}s{c}-to-{d}-dp{e}s{f}"
                              for (a, b, c), (d, e, f) in PRECISION_RESHARD])
def test_checkpoints_move_between_precisions_and_layouts(tmp_path, tool, saved, loaded):
    """The continued run tracks the uninterrupted one within the looser of
    the two precisions' tolerances (the fp32 master weights are what is
    saved, so nothing is lost in the move)."""
    ckpt = tmp_path / "ckpt"
    cfg, model = precision_job(tmp_path, saved[0], saved[2], saved[1], "save")
    full = run_ranks(tool, cfg, model, saved[1], steps=8,
                     args=["--ckpt", str(ckpt), "--save-at", "4"])
    assert all(r["save"]["status"] == "ok" for r in full), full[0]["save"]
    meta = json.loads(next(ckpt.glob("*/meta.json")).read_text())
    assert meta["precision"] == saved[0]
    assert (meta["loss_scaler"] is not None) == (saved[0] == "fp16")
    cfg, model = precision_job(tmp_path, loaded[0], loaded[2], loaded[1], "load")
    resumed = run_ranks(tool, cfg, model, loaded[1], steps=8, args=["--ckpt", str(ckpt), "--resume"])
    tolerance = max(TOLERANCE[saved[0]], TOLERANCE[loaded[0]])
    for r in resumed:
        assert r["load"]["status"] == "ok", r["load"]
        gap = relative_gap(r["losses"], full[0]["losses"][4:])
        assert gap < tolerance, (gap, r["losses"], full[0]["losses"][4:])
        if saved[0] == loaded[0] == "fp16":
            assert r["metrics"]["loss_scale"] == meta["loss_scaler"]["scale"]
