"""Pipeline parallelism, GPT: every layout reproduces the single-rank run.

pp in {2, 4} x schedules {GPipe, 1F1B, interleaved 1F1B with 2 virtual
stages} x ZeRO {0, 1, 2, 3} x dp in {1, 2} (at most 8 ranks), fp32: the
losses of every step and, after one more forward_backward, every tensor's
parameters and gradients (gathered from the stage and shard holding them,
the tied wte included) equal the single-rank run's within 1e-5 relative.
"""
import pytest

import pipeline_support as ps

SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)]
GLOBAL_MICRO_BATCHES = 8
_references = {}


def reference(tmp_path, model, build_dir, **kw):
    key = (model["type"], tuple(sorted(kw.items())))
    if key not in _references:
        config = ps.make_config(accum=GLOBAL_MICRO_BATCHES, **kw)
        _references[key] = ps.run_job(tmp_path, config, model, 1, "reference",
                                      build_dir=build_dir)[0]
    return _references[key]


def check_layout(tmp_path, build_dir, model, pp, dp, schedule, virtual, stage, **kw):
    ref = reference(tmp_path, model, build_dir, **kw)
    config = ps.make_config(pp=pp, dp=dp, accum=GLOBAL_MICRO_BATCHES // dp, stage=stage,
                            schedule=schedule, virtual=virtual, **kw)
    reports = ps.run_job(tmp_path, config, model, pp * dp, "layout", build_dir=build_dir)
    assert {r["pp_rank"] for r in reports} == set(range(pp))
    assert {r["dp_rank"] for r in reports} == set(range(dp))
    ps.assert_equivalent(reports, ref, kw.get("precision", "fp32"),
                         f"pp {pp} x dp {dp}, {schedule} (v {virtual}), ZeRO {stage}")
    return reports


@pytest.mark.parametrize("dp", [1, 2])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("schedule,virtual", SCHEDULES)
@pytest.mark.parametrize("pp", [2, 4])
def test_gpt_layout_equals_single_rank(tmp_path, build_dir, pp, schedule, virtual, stage, dp):
    check_layout(tmp_path, build_dir, ps.GPT, pp, dp, schedule, virtual, stage)


def test_sequence_length_may_change_between_batches(tmp_path, build_dir):
    """Each micro-batch's shape comes with its batch (DeepSpeed's pipeline
    crashes when it changes, #4777): contexts 16, 8, 12 in turn, pp 2 x dp 2
    at ZeRO 2, equal the single-rank run."""
    extra = ["--seq-lens", "16,8,12"]
    ref = ps.run_job(tmp_path, ps.make_config(accum=GLOBAL_MICRO_BATCHES), ps.GPT, 1, "ref",
                     build_dir=build_dir, extra=extra)[0]
    config = ps.make_config(pp=2, dp=2, accum=GLOBAL_MICRO_BATCHES // 2, stage=2)
    reports = ps.run_job(tmp_path, config, ps.GPT, 4, "seq", build_dir=build_dir, extra=extra)
    ps.assert_equivalent(reports, ref, "fp32", "changing sequence lengths")
