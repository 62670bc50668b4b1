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


def reference(tmp_path, model, build_dir, **kw):
    return ps.reference(tmp_path, model, build_dir, GLOBAL_MICRO_BATCHES, **kw)


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


def test_zero2_reduces_each_layer_once_per_step(tmp_path, build_dir):
    """With a pipeline, ZeRO 2 accumulates a stage's gradients over the step's
    micro-batches and reduces each layer once, after its last backward: the
    bytes reduced per step do not grow with the micro-batches, while ZeRO 3
    (which keeps no full gradient, by design) reduces every micro-batch."""
    reduced = {}
    for stage in (2, 3):
        for accum in (2, 8):
            config = ps.make_config(pp=2, dp=2, accum=accum, stage=stage)
            reports = ps.run_job(tmp_path, config, ps.GPT, 4, f"once_{stage}_{accum}",
                                 build_dir=build_dir)
            reduced[stage, accum] = sum(r["metrics"]["comm"]["reduce"]["bytes"] for r in reports)
    assert reduced[2, 2] == reduced[2, 8] > 0, reduced
    assert reduced[3, 8] == 4 * reduced[3, 2], reduced


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_stage_model_state_equals_the_estimate_to_the_byte(tmp_path, build_dir, stage,
                                                            precision):
    """Each rank's model state at rest (parameters + gradients + optimizer
    state, from its memory accounting after the steps) equals what `dstrain
    estimate` prints for its stage: the ZeRO formula with the stage's
    parameter count in place of P (stage 3: plus the small tensors kept
    whole), pp 2 x dp 2."""
    import json
    import subprocess
    config = ps.make_config(pp=2, dp=2, accum=4, stage=stage, precision=precision)
    reports = ps.run_job(tmp_path, config, ps.GPT, 4, "memory", build_dir=build_dir)
    (tmp_path / "est.json").write_text(json.dumps(config))
    (tmp_path / "est_model.json").write_text(json.dumps(ps.GPT))
    out = subprocess.run([str(build_dir / "dstrain"), "estimate", "--config",
                          str(tmp_path / "est.json"), "--model", str(tmp_path / "est_model.json"),
                          "--world-size", "4", "--json"], capture_output=True, text=True,
                         check=True).stdout
    expected = {r["rank"]: r for r in json.loads(out)["pipeline"]["ranks"]}
    for r in reports:
        rest = r["memory_at_rest"]
        state = rest["parameters"] + rest["gradients"] + rest["optimizer_state"]
        assert state == expected[r["pp_rank"]]["model_state_bytes"], (r["pp_rank"], rest)
        assert (expected[r["pp_rank"]]["step_gradient_bytes"] > 0) == (stage == 2)
