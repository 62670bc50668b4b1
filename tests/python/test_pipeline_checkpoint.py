"""Checkpoints across pipeline layouts: a checkpoint saved at one (pp, dp,
ZeRO stage) loads at any other — saved at pp 2, loaded at pp 1 and pp 4 (and
the other way) — natively, with the single-rank tensor names, and training
continues with the uninterrupted run's losses, parameters and gradients."""
import json

import pytest

import pipeline_support as ps

STEPS, SAVE_AT = 6, 3


def layout_config(pp, dp, stage, schedule="1f1b", virtual=1):
    return ps.make_config(pp=pp, dp=dp, accum=8 // dp, stage=stage, schedule=schedule,
                          virtual=virtual)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, build_dir):
    tmp = tmp_path_factory.mktemp("reference")
    return ps.run_job(tmp, layout_config(1, 1, 0), ps.GPT, 1, "reference", steps=STEPS,
                      build_dir=build_dir)[0]


@pytest.mark.parametrize("saved,loaded", [
    ((2, 1, 1), (1, 1, 0)),
    ((2, 1, 1), (4, 1, 2)),
    ((2, 2, 3), (2, 1, 0)),
    ((1, 2, 2), (2, 2, 1)),
    ((4, 1, 0), (2, 2, 3)),
    ((2, 1, 2, "interleaved", 2), (1, 1, 0)),
    ((1, 1, 0), (2, 2, 1, "interleaved", 2)),
])
def test_checkpoint_moves_between_pipeline_layouts(tmp_path, build_dir, reference, saved, loaded):
    ckpt = tmp_path / "ckpt"
    pp, dp = saved[:2]
    saving = ps.run_job(tmp_path, layout_config(*saved), ps.GPT, pp * dp, "save",
                        steps=SAVE_AT, build_dir=build_dir, extra=[str(ckpt), str(SAVE_AT)])
    assert all(r["save"] == "ok" for r in saving), [r["save"] for r in saving]
    meta = json.loads(next(ckpt.glob("*/meta.json")).read_text())
    assert meta["topology"]["pp_size"] == pp
    pp, dp = loaded[:2]
    resumed = ps.run_job(tmp_path, layout_config(*loaded), ps.GPT, pp * dp, "load",
                         steps=STEPS, build_dir=build_dir, extra=["--load", str(ckpt)])
    expected = dict(reference, losses=reference["losses"][SAVE_AT:])
    for report in resumed:
        worst, where = ps.worst_difference(report, expected, kinds=("params", "grads"))
        assert worst <= ps.TOLERANCE["fp32"], (
            f"saved at {saved}, loaded at {loaded}: rank {report['rank']} differs from the "
            f"uninterrupted run by {worst:.3g} at {where}")
