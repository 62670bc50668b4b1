"""Sequence parallelism (tensor_parallel.sequence_parallel, Megatron's
--sequence-parallel): outside the tensor-parallel regions each tp rank holds
1/tp of a micro-batch's token rows; all-gathers before the column-parallel
GEMMs and reduce-scatters after the row-parallel ones replace the
all-reduces, and the LayerNorms' gradients (the final one too, which
Megatron once left unsummed: #1446) are summed over the tp group.

Every layout reproduces the single-rank run as plain tensor parallelism does
(test_tensor_parallel.py's bounds: losses, first gradients and the gradient
norm within 1e-5; after Adam steps within 5e-4): tp 2 and 4, ZeRO 0-3, with
dp and with a pipeline (1F1B, interleaved, zero bubble with its split
backward), fp16/bf16 within the 16-bit
bounds; recomputation is bit-identical to storing; the row-wise activations
shrink (the estimate, equal to the run to the byte, in
test_estimate_layouts.py); and the refusals name the problem. Sequential
models split their samples the same way (their rows: LayerNorms, activations
outside the Linear pairs and the loss hold micro / tp samples per rank).
"""
import pytest

import pipeline_support as ps
from test_tensor_parallel import AFTER_STEPS, GATHERED, GLOBAL_MICRO_BATCHES, GPT4, job_error

# Sequential models: a micro-batch's samples are its rows (4, so that tp 4
# holds one each); a cross-entropy variant of the gathered model too.
CLASSIFIER = dict(GATHERED, loss="cross_entropy")
MODELS = {"gpt": GPT4, "sequential": ps.SEQUENTIAL, "gathered": GATHERED,
          "classifier": CLASSIFIER}


def run(tmp_path, build_dir, tp, dp=1, pp=1, stage=0, schedule="1f1b", name="sp", model=GPT4,
        **kw):
    config = ps.make_config(tp=tp, pp=pp, dp=dp, accum=GLOBAL_MICRO_BATCHES // dp, stage=stage,
                            schedule=schedule, sp=True, **kw)
    return ps.run_job(tmp_path, config, model, tp * dp * pp, name, build_dir=build_dir)


def check(tmp_path, build_dir, tp, dp=1, pp=1, stage=0, schedule="1f1b", model=GPT4, **kw):
    ref = ps.reference(tmp_path, model, build_dir, GLOBAL_MICRO_BATCHES, **kw)
    reports = run(tmp_path, build_dir, tp, dp, pp, stage, schedule, model=model, **kw)
    assert {r["tp_rank"] for r in reports} == set(range(tp))
    what = f"sequence-parallel dp {dp} x tp {tp} x pp {pp}, ZeRO {stage}, {schedule}"
    precision = kw.get("precision", "fp32")
    for r in reports:
        if precision == "fp32":
            worst, where = ps.worst_difference(r, ref, kinds=("first_grads",))
            assert worst <= 1e-5, f"{what}: rank {r['rank']} differs by {worst:.3g} at {where}"
            worst, where = ps.worst_difference(r, ref, kinds=("params", "grads"), losses=False)
            assert worst <= AFTER_STEPS, f"{what}: rank {r['rank']}: {worst:.3g} at {where}"
            norm, expected = r["metrics"]["grad_norm"], ref["metrics"]["grad_norm"]
            assert abs(norm - expected) <= 1e-5 * expected, (what, norm, expected)
        assert r["init_params"] == ref["init_params"], f"{what}: initial weights differ"
    if precision != "fp32":
        ps.assert_equivalent(reports, ref, precision, what)
    return ref, reports


@pytest.mark.parametrize("dp,tp,pp,stage,schedule", [
    # (tp 4, dp 1, ZeRO 0) is test_final_layernorm_gradient_is_summed_over_the_group's run
    (1, 2, 1, 0, "1f1b"), (2, 2, 1, 2, "1f1b"), (1, 4, 1, 3, "1f1b"),
    (2, 4, 1, 1, "1f1b"), (2, 2, 1, 3, "1f1b"), (2, 2, 2, 1, "1f1b"),
    (1, 4, 2, 3, "1f1b"), (1, 2, 2, 0, "interleaved"), (1, 2, 2, 2, "zb-h1"),
    (2, 2, 2, 3, "zb-h1")])
def test_sequence_parallel_layout_equals_single_rank(tmp_path, build_dir, dp, tp, pp, stage,
                                                     schedule):
    kw = {"virtual": 2} if schedule == "interleaved" else {}
    check(tmp_path, build_dir, tp, dp=dp, pp=pp, stage=stage, schedule=schedule, **kw)


@pytest.mark.parametrize("model,dp,tp,pp,stage,schedule", [
    ("sequential", 1, 2, 1, 0, "1f1b"), ("sequential", 2, 2, 1, 3, "1f1b"),
    ("gathered", 1, 4, 1, 3, "1f1b"), ("classifier", 2, 2, 1, 0, "1f1b"),
    ("sequential", 2, 2, 2, 1, "1f1b"), ("sequential", 1, 4, 2, 3, "zb-h1"),
    ("gathered", 1, 2, 2, 0, "zb-h1")])
def test_sequential_models_split_their_samples(tmp_path, build_dir, model, dp, tp, pp, stage,
                                               schedule):
    """A sequential model's rows are its samples: outside the Linear pairs
    (LayerNorm, the activations around them, the loss) each tp rank holds
    micro / tp samples; losses and gradients equal the single rank's."""
    check(tmp_path, build_dir, tp, dp=dp, pp=pp, stage=stage, schedule=schedule,
          model=MODELS[model], micro=4)


def test_final_layernorm_gradient_is_summed_over_the_group(tmp_path, build_dir):
    """Megatron #1446: under sequence parallelism ln_f sees only a rank's rows;
    its gradient must be summed over the tp group, as every block's LayerNorms'
    are. Each tp rank's ln_f gradient equals the single-rank one (a rank that
    kept only its own rows' part would be about 1/tp of it)."""
    ref, reports = check(tmp_path, build_dir, 4)
    for name in ("transformer.ln_f.weight", "transformer.ln_f.bias", "transformer.h.0.ln_1.weight",
                 "transformer.h.3.ln_2.bias"):
        expected = ref["first_grads"][name]
        for r in reports:
            got = r["first_grads"][name]
            assert all(abs(a - b) <= 1e-5 * max(abs(expected[0]), 1e-6)
                       for a, b in zip(got, expected)), (name, r["rank"], got, expected)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_sequence_parallel_mixed_precision_tracks_single_rank(tmp_path, build_dir, precision):
    check(tmp_path, build_dir, 2, dp=2, stage=2, precision=precision)


def test_recomputation_under_sequence_parallelism_is_bit_identical(tmp_path, build_dir):
    runs = []
    for recompute in (False, True):
        reports = run(tmp_path, build_dir, 2, pp=2, stage=1, recompute=recompute,
                      name=f"recompute_{recompute}")
        runs.append([{k: r[k] for k in ("losses", "fb_loss", "params", "grads")}
                     for r in reports])
    assert runs[1] == runs[0]


def test_refusals_name_the_problem(tmp_path, build_dir):
    config = ps.make_config(tp=4, accum=2, micro=2, sp=True)
    err = job_error(tmp_path, build_dir, config, ps.SEQUENTIAL, 4)
    assert ("train_micro_batch_size_per_gpu = 2 samples) over tp_size 4 ranks, which does not "
            "divide them") in err, err
    config = ps.make_config(tp=4, accum=2, micro=1, sp=True)
    err = job_error(tmp_path, build_dir, config, dict(GPT4, n_ctx=6), 4)
    assert "1 x 6 = 6 token rows over tp_size 4 ranks, which does not divide them" in err, err
