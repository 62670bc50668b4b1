"""Tensor parallelism: every layout reproduces the single-rank run.

Sequential models follow Megatron's MLP pattern (column-/row-parallel Linear
pairs); a GPT splits each block by whole heads and MLP features, and its
embedding and tied head by vocabulary rows (vocab-parallel cross-entropy).

tp in {2, 4}, ZeRO {0, 1, 2, 3} and dp in {1, 2}, each pair of them (at most 8 ranks), fp32: the
losses of every step and every tensor's gradient before any step (gathered to
global tensors) equal the single-rank run's within 1e-5 relative; the initial
global weights are bitwise those of one rank; the gradient norm (what clipping
uses) counts the tensors every tp rank holds whole once. A tp rank sums
partial products in another order than one GEMM does (the row-parallel
outputs, the column-parallel input gradients), so values differ by float
rounding (first gradients: ~4e-7), and Adam turns rounding-level differences
of near-zero gradients (attention's key bias) into lr-sized steps: after the
steps, parameters and gradients are compared within 5e-4. Also a
model with an unpaired (gathered) Linear and a LayerNorm, 3D grids with a
pipeline (2 x 2 x 2 and 1 x 4 x 2, 1F1B and zero bubble), fp16/bf16, and the
refusals: a width tp does not divide, n_head tp does not divide (sequence
parallelism: test_sequence_parallel.py; checkpoints:
test_tensor_parallel_checkpoint.py); and a rank killed inside a tp all-reduce is named by the
survivor.
"""
import pathlib

import pytest

import pipeline_support as ps

GLOBAL_MICRO_BATCHES = 8
# An unpaired Linear before a LayerNorm (column-parallel, output gathered), a
# column/row pair with GELU between, and a last Linear gathered.
GATHERED = {"type": "sequential", "input_dim": 16, "loss": "mse", "seed": 9,
            "layers": [{"type": "linear", "out_features": 32}, {"type": "layernorm"},
                       {"type": "linear", "out_features": 32}, {"type": "gelu"},
                       {"type": "linear", "out_features": 32}, {"type": "relu"},
                       {"type": "linear", "out_features": 8}]}
# Four heads, so that tp 4 holds one each.
GPT4 = dict(ps.GPT, n_head=4, n_layer=4, seed=13)
# After Adam steps (see above): rounding-level differences grown by Adam.
AFTER_STEPS = 5e-4


def reference(tmp_path, model, build_dir, **kw):
    return ps.reference(tmp_path, model, build_dir, GLOBAL_MICRO_BATCHES, **kw)


def check(tmp_path, build_dir, model, tp, dp=1, pp=1, stage=0, schedule="1f1b", **kw):
    ref = reference(tmp_path, model, build_dir, **kw)
    config = ps.make_config(tp=tp, pp=pp, dp=dp, accum=GLOBAL_MICRO_BATCHES // dp, stage=stage,
                            schedule=schedule, **kw)
    reports = ps.run_job(tmp_path, config, model, tp * dp * pp, "layout", build_dir=build_dir)
    assert {r["tp_rank"] for r in reports} == set(range(tp))
    what = f"dp {dp} x tp {tp} x pp {pp}, ZeRO {stage}, {schedule}"
    precision = kw.get("precision", "fp32")
    if precision == "fp32":
        for r in reports:
            for kinds, losses, bound in (((("first_grads",), True, 1e-5)),
                                         ((("params", "grads"), False, AFTER_STEPS))):
                worst, where = ps.worst_difference(r, ref, kinds=kinds, losses=losses)
                assert worst <= bound, f"{what}: rank {r['rank']} differs by {worst:.3g} at {where}"
    else:
        ps.assert_equivalent(reports, ref, precision, what)
    for r in reports:
        assert r["init_params"] == ref["init_params"], f"{what}: initial weights differ"
        norm, expected = r["metrics"]["grad_norm"], ref["metrics"]["grad_norm"]
        if kw.get("precision", "fp32") == "fp32":
            assert abs(norm - expected) <= 1e-5 * expected, (what, norm, expected)
    return reports


# Every pair of (tp, ZeRO stage), (stage, dp) and (tp, dp) once: the
# suite's time goes to covering the pairs rather than the whole product.
@pytest.mark.parametrize("tp,stage,dp", [
    (2, 0, 1), (2, 1, 2), (2, 2, 1), (2, 3, 2), (4, 0, 2), (4, 1, 1), (4, 2, 2), (4, 3, 1)])
def test_tensor_parallel_layout_equals_single_rank(tmp_path, build_dir, tp, stage, dp):
    check(tmp_path, build_dir, ps.SEQUENTIAL, tp, dp=dp, stage=stage)


@pytest.mark.parametrize("dp,tp,pp,stage,schedule", [
    (1, 2, 1, 0, "1f1b"), (2, 2, 1, 1, "1f1b"), (1, 2, 1, 2, "1f1b"), (2, 2, 1, 3, "1f1b"),
    (1, 4, 1, 0, "1f1b"), (2, 4, 1, 2, "1f1b"), (2, 2, 2, 1, "1f1b"), (1, 4, 2, 3, "zb-h1")])
def test_gpt_layout_equals_single_rank(tmp_path, build_dir, dp, tp, pp, stage, schedule):
    """Each block's heads and MLP features, and the vocabulary of the tied
    embedding and head, split over tp, with dp, ZeRO and a pipeline."""
    check(tmp_path, build_dir, GPT4, tp, dp=dp, pp=pp, stage=stage, schedule=schedule)


def test_gpt_with_an_interleaved_pipeline(tmp_path, build_dir):
    check(tmp_path, build_dir, GPT4, 2, pp=2, stage=2, schedule="interleaved", virtual=2)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_gpt_mixed_precision_tracks_single_rank(tmp_path, build_dir, precision):
    check(tmp_path, build_dir, GPT4, 2, dp=2, stage=3, precision=precision)


@pytest.mark.parametrize("tp", [2, 4])
def test_gathered_linear_and_layernorm(tmp_path, build_dir, tp):
    check(tmp_path, build_dir, GATHERED, tp, stage=2)


@pytest.mark.parametrize("dp,tp,pp,stage,schedule", [
    (2, 2, 2, 1, "1f1b"), (2, 2, 2, 3, "zb-h1"), (1, 4, 2, 0, "1f1b"), (1, 4, 2, 2, "zb-h1")])
def test_three_dimensional_grid(tmp_path, build_dir, dp, tp, pp, stage, schedule):
    """dp x tp x pp with ZeRO: each (tp, pp) coordinate's dp group shards its
    slices; stages exchange this tp rank's slice of the activations."""
    check(tmp_path, build_dir, ps.SEQUENTIAL, tp, dp=dp, pp=pp, stage=stage, schedule=schedule)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_tracks_single_rank(tmp_path, build_dir, precision):
    check(tmp_path, build_dir, ps.SEQUENTIAL, 2, dp=2, stage=2, precision=precision)


def job_error(tmp_path, build_dir, config, model, world):
    try:
        reports = ps.run_job(tmp_path, config, model, world, "err", build_dir=build_dir)
    except AssertionError as e:
        return str(e)
    return f"no error: {reports}"


def test_refusals_name_the_problem(tmp_path, build_dir):
    narrow = dict(ps.SEQUENTIAL, layers=[{"type": "linear", "out_features": 6}, {"type": "relu"},
                                         {"type": "linear", "out_features": 8}])
    err = job_error(tmp_path, build_dir, ps.make_config(tp=4, accum=2), narrow, 4)
    assert "layers.0 (linear) splits its output features, 6" in err, err
    err = job_error(tmp_path, build_dir, ps.make_config(tp=4, accum=2), ps.GPT, 4)
    assert "n_head 2 does not divide into tensor-parallel size 4" in err, err
    # A vocabulary no tp divides is padded (make_vocab_size_divisible_by), not refused.
    err = job_error(tmp_path, build_dir, ps.make_config(tp=2, accum=2),
                    dict(ps.GPT, vocab_size=255), 2)
    assert err.startswith("no error"), err[:2000]


def test_killed_rank_inside_a_tensor_parallel_all_reduce_is_named(tmp_path, build_dir):
    """Rank 1 of a tp 2 pair dies mid-step: rank 0, waiting in the layers'
    all-reduce (or all-gather), names it and the operation within the timeout."""
    import json

    import test_faults as faults
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(ps.make_config(tp=2, accum=4, timeout=15)))
    model = tmp_path / "model.json"
    model.write_text(json.dumps(ps.SEQUENTIAL))
    faults.kill_rank_1_and_check_survivors(str(build_dir / "tests" / "dst_dp_tool"), cfg, model,
                                           2, ("allreduce", "allgather"))


@pytest.mark.parametrize("pp,stage", [(1, 0), (1, 1), (1, 2), (1, 3), (2, 1), (2, 3)])
def test_model_state_equals_the_estimate_to_the_byte(tmp_path, build_dir, pp, stage):
    """Each rank's model state at rest equals `dstrain estimate`'s figure for
    the layout: the ZeRO formula over dp with a tp rank's slice of the
    parameters (and a stage's, with a pipeline) in place of P."""
    import json
    import subprocess
    dp = 2 if pp == 1 else 1
    config = ps.make_config(tp=2, pp=pp, dp=dp, accum=4, stage=stage, precision="fp16")
    reports = ps.run_job(tmp_path, config, ps.SEQUENTIAL, 2 * pp * dp, "memory",
                         build_dir=build_dir)
    (tmp_path / "est.json").write_text(json.dumps(config))
    (tmp_path / "est_model.json").write_text(json.dumps(ps.SEQUENTIAL))
    out = json.loads(subprocess.run(
        [str(build_dir / "dstrain"), "estimate", "--config", str(tmp_path / "est.json"),
         "--model", str(tmp_path / "est_model.json"), "--world-size", str(2 * pp * dp), "--json"],
        capture_output=True, text=True, check=True).stdout)
    assert out["tp_size"] == 2 and out["parameters_per_rank"] < out["num_parameters"]
    for r in reports:
        rest = r["memory_at_rest"]
        state = rest["parameters"] + rest["gradients"] + rest["optimizer_state"]
        if pp == 1:
            expected = out["stages"][stage]["total_bytes"]
        else:
            expected = out["pipeline"]["ranks"][r["pp_rank"]]["model_state_bytes"]
        assert state == expected, (r["rank"], rest, expected)


def test_seeds_3d_config_trains_from_the_command_line(build_dir):
    """The seeds' 3D config as written (tp 2 x pp 2, ZeRO 3, fp16; dp 1 on
    4 ranks) trains the default GPT under `dstrain launch` and the
    validation loss falls."""
    import re

    import test_cli as cli_tests
    import test_data_parallel as dp_tests
    examples = pathlib.Path(__file__).resolve().parents[2] / "examples" / "3d"
    dstrain = str(build_dir / "dstrain")
    result = cli_tests.run(dstrain, "launch", "--nproc-per-node", "4", "--master-port",
                           dp_tests.free_port(), "--", dstrain, "train", "--config",
                           examples / "ds_config.json", "--steps", "30", "--eval-interval",
                           "15")
    assert result.returncode == 0, result.stderr
    losses = [float(v) for v in re.findall(r"val loss ([0-9.]+)", result.stdout)]
    assert len(losses) >= 2 and losses[-1] < losses[0], result.stdout


def test_seeds_tp4_pp2_config_trains_as_written(build_dir):
    """The seeds' 3D config with tp 4 x pp 2 on 8 ranks (examples/3d/
    ds_config_tp4_pp2.json: bf16, ZeRO 1, CPU optimizer offload, which this CPU
    engine accepts as what it does already) trains the default GPT under
    `dstrain launch` as written, and says so of the offload."""
    import re

    import test_cli as cli_tests
    import test_data_parallel as dp_tests
    written = pathlib.Path(__file__).resolve().parents[2] / "examples" / "3d" / \
        "ds_config_tp4_pp2.json"
    dstrain = str(build_dir / "dstrain")
    result = cli_tests.run(dstrain, "launch", "--nproc-per-node", "8", "--master-port",
                           dp_tests.free_port(), "--", dstrain, "train", "--config", written,
                           "--steps", "8", "--eval-interval", "4", "--eval-batches", "2")
    assert result.returncode == 0, result.stderr
    losses = [float(v) for v in re.findall(r"val loss ([0-9.]+)", result.stdout)]
    assert len(losses) >= 2 and losses[-1] < losses[0], result.stdout


@pytest.mark.parametrize("recompute", [True, 2, "selective"])
def test_recomputation_under_tensor_parallelism_is_bit_identical(tmp_path, build_dir, recompute):
    """A recomputed forward runs the same all-reduces on the same values: the
    losses, parameters and gradients equal the stored run's bit for bit
    (GPT, tp 2 x pp 2, ZeRO 1, 1F1B)."""
    runs = []
    for setting in (False, recompute):
        config = ps.make_config(tp=2, pp=2, accum=4, stage=1, recompute=setting)
        reports = ps.run_job(tmp_path, config, GPT4, 4, f"recompute_{setting}",
                             build_dir=build_dir)
        runs.append([{k: r[k] for k in ("losses", "fb_loss", "params", "grads")}
                     for r in reports])
    assert runs[1] == runs[0], f"recomputation {recompute} changed the tensor-parallel run"


def test_communication_is_reported_per_group(tmp_path, build_dir):
    """The tensor-parallel all-reduces, the data-parallel reductions and the
    pipeline's sends and receives each appear under their own group."""
    config = ps.make_config(tp=2, pp=2, dp=2, accum=4, stage=1)
    reports = ps.run_job(tmp_path, config, GPT4, 8, "groups", build_dir=build_dir)
    for r in reports:
        groups = r["metrics"]["comm"]["by_group"]
        assert groups["tp"]["allreduce"]["bytes"] > 0, groups["tp"]
        assert groups["dp"]["reduce"]["bytes"] + groups["dp"]["allreduce"]["bytes"] > 0
        assert groups["pp"]["send"]["bytes"] > 0 and groups["pp"]["recv"]["bytes"] > 0
        assert groups["dp"]["send"]["count"] == 0 and groups["tp"]["send"]["count"] == 0
        total = r["metrics"]["comm"]["allreduce"]["bytes"]
        assert total == sum(groups[g]["allreduce"]["bytes"] for g in ("dp", "tp", "pp"))


def test_bus_bandwidth_of_all_groups_weighs_each_by_its_size(tmp_path, build_dir):
    """At dp 1 x tp 2 every all-reduce is the tp group's: the bus bandwidth
    over all groups is the tp group's (by its size 2, not by the dp size 1,
    which would make it 0)."""
    import json
    config = ps.make_config(tp=2, accum=4)
    config["dstrain"]["monitor"] = {"log": {"enabled": True, "path": str(tmp_path / "log"),
                                            "format": "jsonl"}}
    ps.run_job(tmp_path, config, GPT4, 2, "busbw", build_dir=build_dir)
    for rank in (0, 1):
        lines = (tmp_path / "log" / f"metrics_rank{rank}.jsonl").read_text().splitlines()
        sample = json.loads(lines[-1])
        tp = sample["comm_by_group"]["tp"]["allreduce"]["bus_bandwidth"]
        assert tp > 0, sample["comm_by_group"]
        every = sample["comm"]["allreduce"]["bus_bandwidth"]
        assert abs(every - tp) <= 1e-6 * tp, (every, tp)
