"""1-bit Adam with pipeline parallelism (DeepSpeed's NCCL-backend 1-bit
optimizers run with pipelines): each stage's data-parallel group exchanges
its own tensors' momenta per tensor, so a 2-stage pipeline over 2 data-
parallel ranks follows the 1-stage run of the same 2 ranks past the freeze
point. One micro-batch per rank keeps the gradients the same bits in both
layouts (the tied embedding's two halves are summed once either way); the
1-bit signs then only see rounding differences, which the bound allows."""
import json
import os
import re
import subprocess

import pytest

import pipeline_support as ps

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "configs")
STEPS = 10


def losses(build_dir, tmp_path, name, world, extra):
    config = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
              "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-4, "freeze_step": 3}},
              "steps_per_print": 1, "dstrain": {"num_threads": 1}}
    config.update(extra)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    dstrain = str(build_dir / "dstrain")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([dstrain, "launch", "--nproc-per-node", str(world), "--", dstrain,
                          "train", "--config", str(path), "--model",
                          os.path.join(CONFIGS, "gpt_tiny.json"), "--steps", str(STEPS)],
                         capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found = [float(x) for x in re.findall(r"^step +\d+/\d+ +loss ([\d.]+)", out.stdout, re.M)]
    assert len(found) == STEPS, out.stdout
    return found


def test_onebit_adam_with_a_pipeline_follows_the_data_parallel_run(build_dir, tmp_path):
    flat = losses(build_dir, tmp_path, "flat", 2, {})
    piped = losses(build_dir, tmp_path, "piped", 4, {"pipeline": {"stages": 2}})
    assert piped[:4] == flat[:4]  # Adam up to the freeze: the same losses to the printed digits
    for p, f in zip(piped, flat):
        assert abs(p - f) <= 1e-3 * abs(f), (piped, flat)
    assert piped[-1] < piped[0]


# 1-bit LAMB with tensor and pipeline parallelism: a tensor's factor inputs
# (the largest variance ratio, the norms of its update) are taken over its
# tensor-parallel slices, its freeze-time RMS over them too, and the model's
# mean RMS over every stage's tensors (the tied copy counted once), so a
# layout without data parallelism (no 1-bit exchange) moves each tensor as
# the single rank does past the freeze point.
LAMB_GPT = dict(ps.GPT, n_head=2, n_layer=4, seed=13)
LAMB_STEPS = 6


def onebit_lamb_config(**kw):
    config = ps.make_config(**kw)
    config["optimizer"] = {"type": "OneBitLamb",
                           "params": {"lr": 3e-3, "weight_decay": 0.01, "freeze_step": 2,
                                      "max_coeff": 0.5, "min_coeff": 0.01}}
    return config


@pytest.fixture(scope="module")
def lamb_reference(tmp_path_factory, build_dir):
    tmp = tmp_path_factory.mktemp("onebit_lamb")
    return ps.run_job(tmp, onebit_lamb_config(accum=4), LAMB_GPT, 1, "reference",
                      steps=LAMB_STEPS, build_dir=build_dir)[0]


@pytest.mark.parametrize("tp,pp", [(2, 1), (1, 2), (2, 2)])
def test_onebit_lamb_moves_each_tensor_as_one_rank(tmp_path, build_dir, lamb_reference, tp, pp):
    config = onebit_lamb_config(tp=tp, pp=pp, accum=4)
    for r in ps.run_job(tmp_path, config, LAMB_GPT, tp * pp, "layout", steps=LAMB_STEPS,
                        build_dir=build_dir):
        worst, where = ps.worst_difference(r, lamb_reference, kinds=("params",))
        assert worst <= 2e-5, f"tp {tp} pp {pp}: {worst:.3g} at {where}"


def per_tensor_values(ckpt):
    """1-bit LAMB's (scaling, averaged trust ratio, last factor) by tensor."""
    meta = json.loads(next(ckpt.glob("*/meta.json")).read_text())
    values = {}
    for shard in meta["shards"]:
        values.update(shard["per_tensor"])
    return values


def test_onebit_lamb_resumes_in_another_layout(tmp_path, build_dir, lamb_reference):
    """Each tensor's frozen values travel by name: saved by a 2-stage pipeline
    past the freeze, they are the single rank's (the scalings from the mean
    RMS over both stages' tensors), and loaded by two tensor-parallel ranks
    the run goes on as the single rank's."""
    ckpt, single = tmp_path / "ckpt", tmp_path / "single"
    saved = ps.run_job(tmp_path, onebit_lamb_config(pp=2, accum=4), LAMB_GPT, 2, "saved",
                       steps=4, build_dir=build_dir, extra=[str(ckpt)])
    assert all(r["save"] == "ok" for r in saved), [r["save"] for r in saved]
    ps.run_job(tmp_path, onebit_lamb_config(accum=4), LAMB_GPT, 1, "single", steps=4,
               build_dir=build_dir, extra=[str(single)])
    piped, alone = per_tensor_values(ckpt), per_tensor_values(single)
    assert piped.keys() == alone.keys() == lamb_reference["params"].keys()
    for name, values in alone.items():
        assert values[0] != 1.0  # the scalings were set at the freeze
        for a, b in zip(piped[name], values):
            assert abs(a - b) <= 1e-5 * abs(b), (name, piped[name], values)
    resumed = ps.run_job(tmp_path, onebit_lamb_config(tp=2, accum=4), LAMB_GPT, 2, "resumed",
                         steps=LAMB_STEPS, build_dir=build_dir, extra=["--load", str(ckpt)])
    for r in resumed:
        assert len(r["losses"]) == LAMB_STEPS - 4
        worst, where = ps.worst_difference(r, lamb_reference, kinds=("params",), losses=False)
        assert worst <= 2e-5, f"resumed: {worst:.3g} at {where}"
        for a, b in zip(r["losses"], lamb_reference["losses"][4:]):
            assert ps.relative(a, b) <= 1e-5, (r["losses"], lamb_reference["losses"])


def test_onebit_lamb_with_data_parallelism_trains_in_every_layout(tmp_path, build_dir):
    """With two data-parallel ranks the momenta travel in 1 bit, each rank's
    buffer (a stage's tensors, a slice of each) compressed as a whole: the
    layouts follow the 1-stage run as 1-bit Adam's pipeline does."""
    def losses(tp, pp):
        config = onebit_lamb_config(dp=2, tp=tp, pp=pp, accum=2)
        return ps.run_job(tmp_path, config, LAMB_GPT, 2 * tp * pp, f"dp2_tp{tp}_pp{pp}",
                          steps=LAMB_STEPS, build_dir=build_dir)[0]["losses"]
    flat = losses(1, 1)
    for tp, pp in ((2, 1), (1, 2)):
        got = losses(tp, pp)
        assert got[:3] == pytest.approx(flat[:3], rel=1e-6)  # LAMB up to the freeze
        assert got == pytest.approx(flat, rel=1e-3), (tp, pp, got, flat)
        assert got[-1] < got[0]
