"""Pipeline parallelism under fp16 and bf16, and activation recomputation.

Mixed precision: pp 2 with ZeRO {0, 1, 2, 3}, dp {1, 2}, {1F1B, interleaved}
and {fp16, bf16} (every pair of values in some case) against the single-rank
run in the same precision, within the documented
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


# Every pair of (ZeRO stage, dp, schedule, precision) values appears in some
# case (each stage with both dp, both schedules and both precisions; every
# schedule with every precision and dp), plus the two hardest corners at dp 2.
MIXED_PRECISION_CASES = [
    (0, 1, "1f1b", "fp16"), (0, 2, "interleaved", "bf16"),
    (1, 1, "1f1b", "bf16"), (1, 2, "interleaved", "fp16"),
    (2, 1, "interleaved", "fp16"), (2, 2, "1f1b", "bf16"),
    (3, 1, "interleaved", "bf16"), (3, 2, "1f1b", "fp16"),
    (2, 2, "interleaved", "fp16"), (3, 2, "interleaved", "bf16"),
]


@pytest.mark.parametrize("stage,dp,schedule,precision", MIXED_PRECISION_CASES)
def test_mixed_precision_layout_tracks_single_rank(tmp_path, build_dir, stage, dp, schedule,
                                                   precision):
    virtual = 2 if schedule == "interleaved" else 1
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


@pytest.mark.parametrize("recompute,schedule,precision", [
    (2, "1f1b", "fp32"), (3, "interleaved", "bf16"), (2, "zb-h1", "fp32"),
    ("selective", "1f1b", "fp32"), ("selective", "zb-h1", "fp32")])
def test_interval_and_selective_recomputation_are_bit_identical(tmp_path, build_dir, recompute,
                                                                 schedule, precision):
    """DeepSpeed's activation_checkpoint_interval (groups of k layers, their
    forward recomputed together) and Megatron's selective recomputation (the
    attention probabilities only) leave every loss, parameter and gradient
    unchanged, at pp 2 x dp 2 with ZeRO 2, under 1F1B, interleaving and the
    zero-bubble split backward."""
    virtual = 2 if schedule == "interleaved" else 1
    runs = []
    for setting in (False, recompute):
        config = ps.make_config(pp=2, dp=2, accum=4, stage=2, precision=precision,
                                schedule=schedule, virtual=virtual, recompute=setting)
        reports = ps.run_job(tmp_path, config, ps.GPT, 4, f"recompute_{setting}",
                             build_dir=build_dir)
        runs.append([{k: r[k] for k in ("losses", "fb_loss", "params", "grads")}
                     for r in reports])
    assert runs[1] == runs[0], f"recomputation {recompute} changed the run"


def test_recomputation_lowers_activation_memory(tmp_path, build_dir):
    model = dict(ps.GPT, n_ctx=64, d_model=64)
    peaks = []
    for recompute in (False, True):
        config = ps.make_config(accum=2, micro=4, recompute=recompute)
        report = ps.run_job(tmp_path, config, model, 1, f"memory_{recompute}", steps=1,
                            build_dir=build_dir)[0]
        peaks.append(report["metrics"]["memory"]["activations"]["peak_bytes"])
    assert peaks[1] < 0.6 * peaks[0], f"activation peak {peaks[0]} -> {peaks[1]} bytes"


def test_selective_recomputation_keeps_the_attention_probabilities_once(tmp_path, build_dir):
    """Selective recomputation keeps one [B, H, T, T] region for all blocks
    instead of one per block: the activation peak drops by exactly
    (n_layer - 1) x B x H x T x T floats (one slot: the plain schedule)."""
    model = dict(ps.GPT, n_ctx=64, d_model=64)
    micro = 4
    peaks = []
    for recompute in (False, "selective"):
        config = ps.make_config(accum=2, micro=micro, recompute=recompute)
        report = ps.run_job(tmp_path, config, model, 1, f"selective_{recompute}", steps=1,
                            build_dir=build_dir)[0]
        peaks.append(report["metrics"]["memory"]["activations"]["peak_bytes"])
    probabilities = micro * model["n_head"] * model["n_ctx"] ** 2 * 4
    assert peaks[0] - peaks[1] == (model["n_layer"] - 1) * probabilities, peaks
