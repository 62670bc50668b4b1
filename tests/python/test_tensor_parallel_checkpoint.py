"""Checkpoints across tensor-parallel layouts: a checkpoint saved at one
(dp, tp, pp, ZeRO stage) loads at any other — tp 2 x pp 2 to one rank and to
tp 4, and back, with sequence parallelism or without — natively: the files hold the whole model's tensors under
their single-rank names, each rank writing the pieces of the whole flat state
its slices are (a row-parallel weight's slice is one strided run per row).

Two oracles. Exact: the loading layout saves again at once, and the second
checkpoint's weights and optimizer state, assembled from its pieces, equal the
first's bit for bit. Continued: training goes on from the loaded state with
the uninterrupted single-rank run's losses, parameters and gradients (within
the tensor-parallel bound after Adam steps, see test_tensor_parallel.py).
"""
import json

import numpy as np
import pytest

import families_layouts as fl
import pipeline_support as ps
import safetensors_io as sio
from test_tensor_parallel import AFTER_STEPS, GPT4

STEPS = ps.STEPS
SAVE_AT = STEPS // 2
GLOBAL_MICRO_BATCHES = 8


def layout_config(dp, tp, pp, stage, sp=False):
    return ps.make_config(dp=dp, tp=tp, pp=pp, accum=GLOBAL_MICRO_BATCHES // dp, stage=stage,
                          sp=sp)


def whole_state(ckpt):
    """(meta, {state: whole flat array}, {tensor: array}) of the checkpoint in
    `ckpt`: every shard's pieces put in place; an element no shard holds
    stays NaN."""
    meta_path = next(ckpt.glob("*/meta.json"))
    meta = json.loads(meta_path.read_text())
    total = meta["num_parameters"]
    states = {}
    for shard in meta["shards"]:
        tensors, _ = sio.load_numpy(meta_path.parent / shard["file"])
        pieces = shard.get("pieces", [[shard["begin"], shard["end"]]])
        for name, values in tensors.items():
            flat = states.setdefault(name, np.full(total, np.nan, np.float32))
            at = 0
            for begin, end in pieces:
                flat[begin:end] = values[at:at + end - begin]
                at += end - begin
    weights, _ = sio.load_numpy(meta_path.parent / "model.safetensors")
    return meta, states, weights


def move(tmp_path, build_dir, model, saved, loaded):
    """Saves at layout `saved` after SAVE_AT steps, loads at `loaded`, saves
    again at once and trains on; returns both checkpoints and the reports."""
    first, second = tmp_path / "first", tmp_path / "second"
    dp, tp, pp = saved[:3]
    saving = ps.run_job(tmp_path, layout_config(*saved), model, dp * tp * pp, "save",
                        steps=SAVE_AT, build_dir=build_dir, extra=[str(first), str(SAVE_AT)])
    assert all(r["save"] == "ok" for r in saving), [r["save"] for r in saving]
    dp, tp, pp = loaded[:3]
    resumed = ps.run_job(tmp_path, layout_config(*loaded), model, dp * tp * pp, "load",
                         steps=STEPS, build_dir=build_dir,
                         extra=[str(second), str(SAVE_AT), "--load", str(first)])
    assert all(r["save"] == "ok" for r in resumed), [r["save"] for r in resumed]
    return whole_state(first), whole_state(second), resumed


@pytest.mark.parametrize("model,saved,loaded", [
    ("gpt", (1, 2, 2, 1), (1, 1, 1, 0)),
    ("gpt", (1, 2, 2, 1), (1, 4, 1, 2)),
    ("gpt", (1, 4, 1, 3), (2, 2, 2, 1)),
    ("gpt", (1, 1, 1, 0), (2, 2, 1, 3)),
    ("sequential", (2, 2, 2, 2), (1, 4, 2, 0)),
    ("gpt", (1, 2, 2, 2, True), (1, 4, 1, 1)),  # sequence-parallel -> not
    ("llama", (1, 2, 2, 1), (1, 1, 1, 0)),  # grouped-query heads split, then whole
    ("llama", (1, 1, 1, 0), (2, 2, 1, 3, True)),
    ("bloom", (1, 2, 2, 2, True), (1, 4, 1, 1)),  # interleaved qkv and ALiBi at tp 4
])
def test_checkpoint_moves_between_tensor_parallel_layouts(tmp_path, build_dir, model, saved,
                                                          loaded):
    spec = {"gpt": GPT4, "llama": fl.LLAMA, "bloom": fl.BLOOM}.get(model, ps.SEQUENTIAL)
    (meta1, states1, weights1), (meta2, states2, weights2), resumed = move(
        tmp_path, build_dir, spec, saved, loaded)
    assert (meta1["topology"]["tp_size"], meta2["topology"]["tp_size"]) == (saved[1], loaded[1])
    # Global names and shapes, whatever the layout; the same bits after the move.
    assert list(weights1) == list(weights2)
    for name in weights1:
        assert weights1[name].shape == weights2[name].shape, name
        assert np.array_equal(weights1[name], weights2[name]), f"weights of {name} moved"
    for name in ("exp_avg", "exp_avg_sq"):
        for states, at in ((states1, saved), (states2, loaded)):
            assert not np.isnan(states[name]).any(), f"{name} saved at {at} has a gap"
        assert np.array_equal(states1[name], states2[name]), f"{name} moved from {saved} to {loaded}"
    # Training continues as the uninterrupted single-rank run does.
    reference = ps.reference(tmp_path, spec, build_dir, GLOBAL_MICRO_BATCHES)
    expected = dict(reference, losses=reference["losses"][SAVE_AT:])
    for report in resumed:
        worst, where = ps.worst_difference(report, expected, kinds=("params", "grads"))
        assert worst <= AFTER_STEPS, (
            f"saved at {saved}, loaded at {loaded} (dp, tp, pp, ZeRO): rank {report['rank']} "
            f"differs from the uninterrupted run by {worst:.3g} at {where}")



def test_weights_only_load_takes_each_ranks_slices(tmp_path, build_dir):
    """load_weights at tp 2 x pp 2 (a spec change's way in) takes each rank's
    slices of the consolidated tensors: the global weights read back are the
    saved ones, bit for bit."""
    ckpt = tmp_path / "ckpt"
    saving = ps.run_job(tmp_path, layout_config(1, 1, 1, 0), GPT4, 1, "save", steps=SAVE_AT,
                        build_dir=build_dir, extra=[str(ckpt), str(SAVE_AT)])
    assert saving[0]["save"] == "ok", saving[0]["save"]
    loaded = ps.run_job(tmp_path, layout_config(1, 2, 2, 3), GPT4, 4, "weights", steps=0,
                        build_dir=build_dir, extra=["--load-weights", str(ckpt)])
    for report in loaded:
        assert report["params"] == saving[0]["params"], f"rank {report['rank']}"
