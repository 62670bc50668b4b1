"""DeepSpeed's gradient averaging options: prescale_gradients (each rank's
gradients divided by the dp size before the reduction) and
gradient_predivide_factor f (divided by f before, multiplied by f / dp size
after). Either way the reduced gradient is the mean, so the losses stay
within fp32 roundoff of the plain run, at every ZeRO stage and dp 2 and 4;
under fp16 (loss scaling) and with 16-bit communication too. The default
(no key) is the plain run bit for bit (the other tests' reference runs).
"""
import json

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)

STEPS = 6


def run(tmp_path, tool, stage, dp, name, **keys):
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, 1, dp, name)
    config = json.loads(cfg.read_text())
    config.update(keys)
    cfg.write_text(json.dumps(config))
    return dp_tests.run_ranks(tool, cfg, model, dp, steps=STEPS)[0]["losses"]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("dp", [2, 4])
def test_prescale_and_predivide_keep_the_mean(tmp_path, tool, stage, dp):
    plain = run(tmp_path, tool, stage, dp, "plain")
    for name, keys in [("prescale", {"prescale_gradients": True}),
                       ("predivide2", {"gradient_predivide_factor": 2.0}),
                       ("predivide_dp", {"gradient_predivide_factor": float(dp)}),
                       ("predivide_odd", {"gradient_predivide_factor": 3.7})]:
        losses = run(tmp_path, tool, stage, dp, name, **keys)
        gap = dp_tests.relative_gap(losses, plain)
        assert gap <= 1e-5, (name, gap)
        assert len(losses) == STEPS


@pytest.mark.parametrize("stage", [1, 3])
def test_under_fp16_and_16_bit_communication(tmp_path, tool, stage):
    fp16 = {"fp16": {"enabled": True, "initial_scale_power": 8}}
    plain = run(tmp_path, tool, stage, 2, "plain16", **fp16)
    pre = run(tmp_path, tool, stage, 2, "pre16", prescale_gradients=True, **fp16)
    assert dp_tests.relative_gap(pre, plain) <= 2e-3
    wire = {"communication_data_type": "bf16"}
    plain_wire = run(tmp_path, tool, stage, 2, "plainw", **wire)
    div_wire = run(tmp_path, tool, stage, 2, "divw", gradient_predivide_factor=2.0, **wire)
    assert dp_tests.relative_gap(div_wire, plain_wire) <= 1e-3


def test_one_rank_with_a_predivide_factor_is_the_plain_run(tmp_path, tool):
    plain = run(tmp_path, tool, 0, 1, "one")
    divided = run(tmp_path, tool, 0, 1, "one_div", gradient_predivide_factor=4.0)
    assert dp_tests.relative_gap(divided, plain) <= 1e-6
