"""Pipeline parallelism under fp16 and bf16, and activation recomputation.

Mixed precision: pp 2 x ZeRO {0, 1, 2, 3} x dp {1, 2} x {1F1B, interleaved}
against the single-rank run in the same precision, within the documented
16-bit tolerance (the stages exchange 16-bit-rounded activations and
gradients exactly as the single rank rounds them at layer boundaries; the tied
wte's two gradient copies are each rounded before their sum, so it may differ
by a rounding).

Activation checkpointing (an "activation_checkpointing" section turns full
recomputation on): a recomputed forward reproduces the stored one bit for bit,
so every loss, parameter and gradient equals the plain run exactly, with and
without a pipeline, in fp32 and in bf16.
"""
import pytest

import pipeline_support as ps
from test_pipeline_gpt import check_layout


@pytest.mark.parametrize("dp", [1, 2])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("schedule,virtual", [("1f1b", 1), ("interleaved", 2)])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_layout_tracks_single_rank(tmp_path, build_dir, precision, schedule,
                                                   virtual, stage, dp):
    check_layout(tmp_path, build_dir, ps.GPT, 2, dp, schedule, virtual, stage,
                 precision=precision)


@pytest.mark.parametrize("pp,stage", [(1, 0), (1, 3), (2, 0), (2, 2), (4, 1)])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_recomputation_is_bit_identical(tmp_path, build_dir, precision, pp, stage):
    world = pp * 2 if pp < 4 else pp
    dp = world // pp
    runs = []
    for recompute in (False, True):
        config = ps.make_config(pp=pp, dp=dp, accum=8 // dp, stage=stage, precision=precision,
                                recompute=recompute)
        reports = ps.run_job(tmp_path, config, ps.GPT, world, f"recompute_{recompute}",
                             build_dir=build_dir)
        runs.append([{k: r[k] for k in ("losses", "fb_loss", "params", "grads")}
                     for r in reports])
    plain, recomputed = runs
    assert recomputed == plain, "recomputed activations changed the run"


def test_recomputation_lowers_activation_memory(tmp_path, build_dir):
    model = dict(ps.GPT, n_ctx=64, d_model=64)
    peaks = []
    for recompute in (False, True):
        config = ps.make_config(accum=2, micro=4, recompute=recompute)
        report = ps.run_job(tmp_path, config, model, 1, f"memory_{recompute}", steps=1,
                            build_dir=build_dir)[0]
        peaks.append(report["metrics"]["memory"]["activations"]["peak_bytes"])
    assert peaks[1] < 0.6 * peaks[0], f"activation peak {peaks[0]} -> {peaks[1]} bytes"
