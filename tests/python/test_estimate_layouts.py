"""`dstrain estimate` for dp x tp x pp layouts: per rank, model state and
activations (the activation store at the schedule's peak of micro-batches in
flight, and the work buffers) equal what a run measures, to the byte; with
--memory-per-rank it lists every layout of the world size and suggests the
most data parallelism that fits, then the least tensor parallelism."""
import json
import subprocess

import pytest

import pipeline_support as ps
from test_tensor_parallel import GPT4


def estimate(build_dir, tmp_path, config, model, world, *extra, check=True):
    (tmp_path / "est.json").write_text(json.dumps(config))
    (tmp_path / "est_model.json").write_text(json.dumps(model))
    return subprocess.run(
        [str(build_dir / "dstrain"), "estimate", "--config", str(tmp_path / "est.json"),
         "--model", str(tmp_path / "est_model.json"), "--world-size", str(world), *extra],
        capture_output=True, text=True, check=check)


@pytest.mark.parametrize("model,dp,tp,pp,stage,kw", [
    ("gpt", 1, 2, 1, 0, {}),
    ("gpt", 1, 2, 2, 2, {"precision": "fp16"}),
    ("gpt", 2, 1, 2, 3, {"schedule": "zb-h1", "precision": "bf16"}),
    ("gpt", 1, 2, 2, 1, {"schedule": "interleaved", "virtual": 2, "recompute": True}),
    ("gpt", 2, 2, 1, 1, {"recompute": "selective"}),
    ("sequential", 2, 2, 2, 0, {"recompute": 2}),
    ("gpt", 1, 2, 2, 1, {"sp": True}),
    ("gpt", 1, 2, 2, 2, {"sp": True, "schedule": "zb-h1"}),
    ("gpt", 2, 4, 1, 0, {"sp": True, "precision": "fp16"}),
    ("sequential", 1, 2, 2, 1, {"sp": True, "micro": 4, "schedule": "zb-h1"}),
])
def test_rank_memory_equals_the_estimate_to_the_byte(tmp_path, build_dir, model, dp, tp, pp,
                                                     stage, kw):
    spec = GPT4 if model == "gpt" else ps.SEQUENTIAL
    config = ps.make_config(dp=dp, tp=tp, pp=pp, accum=8 // dp, stage=stage, **kw)
    world = dp * tp * pp
    reports = ps.run_job(tmp_path, config, spec, world, "memory", steps=1, build_dir=build_dir)
    out = json.loads(estimate(build_dir, tmp_path, config, spec, world, "--json").stdout)
    stages = out["pipeline"]["ranks"] if pp > 1 else [out["per_rank"]]
    # The enumerated layout with these sizes says the same.
    listed = next(l for l in out["layouts"] if (l["dp"], l["tp"], l["pp"]) == (dp, tp, pp))
    for r in reports:
        rest = r["memory_at_rest"]
        expected = stages[r["pp_rank"]]
        state = rest["parameters"] + rest["gradients"] + rest["optimizer_state"]
        assert state == expected["model_state_bytes"], (r["rank"], rest, expected)
        assert rest["activations"] == expected["activation_bytes"], (r["rank"], rest, expected)
        same = listed["stages"][r["pp_rank"]]
        assert (same["model_state_bytes"], same["activation_bytes"]) == (
            expected["model_state_bytes"], expected["activation_bytes"])
    assert out["per_rank"]["total_bytes"] == max(
        s["model_state_bytes"] + s["step_gradient_bytes"] + s["activation_bytes"] for s in stages)


def test_sequence_parallelism_splits_the_row_wise_activations(tmp_path, build_dir):
    """The row-wise tensors a micro-batch keeps — each block's output,
    LayerNorm outputs and statistics and residual, the embedding's output,
    ln_f's — shrink from N to N / tp rows; the tensor-parallel regions' (QKV,
    attention, MLP) do not."""
    saved = []
    for sp in (False, True):
        config = ps.make_config(tp=2, pp=2, accum=4, stage=1, sp=sp)
        out = json.loads(estimate(build_dir, tmp_path, config, GPT4, 4, "--json").stdout)
        saved.append(sum(r["saved_activation_bytes_per_micro_batch"]
                         for r in out["pipeline"]["ranks"]))
    N, C = 2 * GPT4["n_ctx"], GPT4["d_model"]
    gone = N - N // 2  # rows a tp 2 rank no longer keeps
    per_block = 4 * gone * C + 4 * gone  # out, ln_1, res2, ln_2; their means and rstds
    expected = GPT4["n_layer"] * per_block + gone * C + (gone * C + 2 * gone)
    assert saved[0] - saved[1] == 4 * expected, saved


def test_the_suggestion_is_the_most_data_parallelism_that_fits(tmp_path, build_dir):
    config = ps.make_config(accum=4, stage=1)
    out = json.loads(estimate(build_dir, tmp_path, config, GPT4, 8, "--json").stdout)
    layouts = out["layouts"]
    assert [(l["dp"], l["tp"], l["pp"]) for l in layouts] == [
        (8, 1, 1), (4, 1, 2), (4, 2, 1), (2, 1, 4), (2, 2, 2), (2, 4, 1),
        (1, 1, 8), (1, 2, 4), (1, 4, 2), (1, 8, 1)]
    # 8 heads do not divide GPT4's 4; 8 stages exceed its 6 layers.
    assert "n_head 4 does not divide into tensor-parallel size 8" in layouts[-1]["error"]
    assert "error" in layouts[6], layouts[6]
    # A budget that the dp 8 layout exceeds but a model-parallel one meets.
    runnable = [l for l in layouts if "peak_bytes" in l]
    budget = sorted(l["peak_bytes"] for l in runnable)[len(runnable) // 2]
    first_fit = next(l for l in layouts if "peak_bytes" in l and l["peak_bytes"] <= budget)
    text = estimate(build_dir, tmp_path, config, GPT4, 8, "--memory-per-rank", str(budget)).stdout
    assert (f"suggested: dp {first_fit['dp']} x tp {first_fit['tp']} x pp {first_fit['pp']} "
            in text), text
    assert "cannot run: tensor parallelism: n_head 4 does not divide" in text, text
    text = estimate(build_dir, tmp_path, config, GPT4, 8, "--memory-per-rank", "1KiB").stdout
    assert "no layout of this world size fits" in text, text
    bad = estimate(build_dir, tmp_path, config, GPT4, 8, "--memory-per-rank", "lots", check=False)
    assert bad.returncode == 2 and "--memory-per-rank lots: expected a positive number" in \
        bad.stderr, bad.stderr
