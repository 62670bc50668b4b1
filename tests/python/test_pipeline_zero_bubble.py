"""Zero-bubble pipeline (ZB-H1): each layer's backward split into its input
half (on the critical path, sent to the previous stage at once) and its
weight half (deferred into the bubble), for GPT and sequential models.

pp in {2, 4} x ZeRO {0, 1, 2, 3} x dp in {1, 2} (at most 8 ranks), fp32: the
losses of every step and every tensor's parameters and gradients equal the
single-rank run's within 1e-5 relative; fp16 / bf16 within the 16-bit
tolerance; with activation checkpointing the run is bit-identical to the
plain zero-bubble run (the weight half recomputes the forward as the input
half did).
"""
import pytest

import pipeline_support as ps
from test_pipeline_gpt import check_layout


@pytest.mark.parametrize("dp", [1, 2])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("pp", [2, 4])
@pytest.mark.parametrize("model", ["gpt", "sequential"])
def test_zero_bubble_layout_equals_single_rank(tmp_path, build_dir, model, pp, stage, dp):
    spec = ps.GPT if model == "gpt" else ps.SEQUENTIAL
    reports = check_layout(tmp_path, build_dir, spec, pp, dp, "zb-h1", 1, stage)
    for r in reports:  # the step really ran split: no whole backward
        ops = {e["op"] for e in r["metrics"]["pipeline"]["timeline"]}
        assert {"backward_input", "backward_weight"} <= ops and "backward" not in ops, ops


@pytest.mark.parametrize("stage", [0, 3])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_zero_bubble_mixed_precision_tracks_single_rank(tmp_path, build_dir, precision, stage):
    check_layout(tmp_path, build_dir, ps.GPT, 2, 2, "zb-h1", 1, stage, precision=precision)


@pytest.mark.parametrize("pp,stage,precision", [(2, 0, "fp32"), (2, 3, "bf16"), (4, 2, "fp32")])
def test_zero_bubble_recomputation_is_bit_identical(tmp_path, build_dir, pp, stage, precision):
    dp = 2 if pp == 2 else 1
    runs = []
    for recompute in (False, True):
        config = ps.make_config(pp=pp, dp=dp, accum=8 // dp, stage=stage, precision=precision,
                                schedule="zb-h1", recompute=recompute)
        reports = ps.run_job(tmp_path, config, ps.GPT, pp * dp, f"zb_recompute_{recompute}",
                             build_dir=build_dir)
        runs.append([{k: r[k] for k in ("losses", "fb_loss", "params", "grads")}
                     for r in reports])
    assert runs[1] == runs[0], "recomputed activations changed the zero-bubble run"
