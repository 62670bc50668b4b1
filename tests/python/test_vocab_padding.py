"""Megatron's padded vocabulary (make_vocab_size_divisible_by, default 128
x tp): the embedding and the LM head hold padding rows so that any tensor-
parallel size divides them, but no token reads them and their logits never
enter the loss or its gradient, and the global tensors (get_param,
checkpoints) keep the true vocabulary.

Vocabulary 300 (not a multiple of 128): unpadded (multiple 1), padded at tp
1 (384 rows) and at tp 2 (512: the second rank holds 44 real rows), tp 4
(512: the last rank holds padding only) give the single-rank run's losses,
parameters and gradients; a checkpoint moves between paddings; GPT-2's real
vocabulary (50257) now takes tensor parallelism."""
import json
import pathlib

import numpy as np
import pytest

import families_layouts as fl
import pipeline_support as ps
import safetensors_io as sio
from test_estimate_layouts import estimate

LLAMA = dict(fl.LLAMA, vocab_size=300, num_hidden_layers=2, num_key_value_heads=4, seed=21)
UNPADDED = dict(LLAMA, make_vocab_size_divisible_by=1)


def run(tmp_path, build_dir, model, name, tp=1, extra=(), steps=ps.STEPS):
    return ps.run_job(tmp_path, ps.make_config(tp=tp, accum=4), model, tp, name,
                      build_dir=build_dir, steps=steps, extra=extra)


def test_padding_changes_nothing_the_model_computes(tmp_path, build_dir):
    plain = run(tmp_path, build_dir, UNPADDED, "plain")[0]
    padded = run(tmp_path, build_dir, LLAMA, "padded")[0]
    # The same global tensors (get_param: the true vocabulary's rows).
    assert padded["init_params"] == plain["init_params"]
    assert padded["params"].keys() == plain["params"].keys()
    # The logits' GEMM has more columns (its values' bits may differ); the
    # losses and every tensor stay equal to fp32 roundoff (grown by Adam).
    ps.assert_equivalent([padded], plain, "fp32", "padded to 384 rows at tp 1",
                         fl.TRAINED_TOLERANCE)
    assert max(ps.relative(a, b) for a, b in zip(padded["losses"], plain["losses"])) <= 1e-6
    # No gradient reaches a padding row: the padded embedding's memory is the
    # only difference (84 rows of 32 x 2 tensors: parameters and gradients).
    assert padded["memory_at_rest"]["parameters"] - plain["memory_at_rest"]["parameters"] == \
        2 * 84 * 32 * 4


@pytest.mark.parametrize("tp", [2, 4])
def test_padded_tensor_parallel_layouts_equal_the_unpadded_single_rank(tmp_path, build_dir, tp):
    plain = run(tmp_path, build_dir, UNPADDED, "plain")[0]
    reports = run(tmp_path, build_dir, LLAMA, f"tp{tp}", tp=tp)
    ps.assert_equivalent(reports, plain, "fp32", f"tp {tp}, vocabulary padded to 512",
                         fl.TRAINED_TOLERANCE)


def test_checkpoints_keep_the_true_vocabulary_and_move_between_paddings(tmp_path, build_dir):
    ckpt = tmp_path / "ckpt"
    saved = run(tmp_path, build_dir, LLAMA, "save", tp=2, steps=2,
                extra=[str(ckpt), "2"])
    assert all(r["save"] == "ok" for r in saved), saved
    tag = (ckpt / "latest").read_text().strip()
    weights, _ = sio.load_numpy(str(ckpt / tag / "model.safetensors"))
    assert weights["model.embed_tokens.weight"].shape == (300, 32)
    assert weights["lm_head.weight"].shape == (300, 32)
    # Loaded unpadded on one rank, then saved again: the same weights bit for bit.
    again = tmp_path / "again"
    loaded = run(tmp_path, build_dir, UNPADDED, "load", steps=2,
                 extra=[str(again), "2", "--load", str(ckpt)])
    assert loaded[0]["save"] == "ok", loaded[0]["save"]
    moved, _ = sio.load_numpy(str(again / (again / "latest").read_text().strip() /
                                  "model.safetensors"))
    for name, w in weights.items():
        assert np.array_equal(w, moved[name]), name


def test_gpt2s_vocabulary_takes_tensor_parallelism(tmp_path, build_dir):
    gpt2 = json.loads((pathlib.Path(__file__).resolve().parents[2] / "examples" / "configs" /
                       "gpt2_124m.json").read_text())
    config = ps.make_config(accum=4)
    out = json.loads(estimate(build_dir, tmp_path, config, gpt2, 4, "--json").stdout)
    layouts = {(l["dp"], l["tp"], l["pp"]): l for l in out["layouts"]}
    for tp in (2, 4):
        assert "error" not in layouts[(4 // tp, tp, 1)], layouts[(4 // tp, tp, 1)]
    assert out["num_parameters"] == 124439808  # GPT-2 small, unpadded
