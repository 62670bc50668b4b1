"""ZeRO 3's per-layer-type control (zero_optimization.zero_force_param_types /
zero_allowed_param_types): tensors of forced types, or of types outside the
allowed list, stay whole on every rank. The parameter memory per rank is the
shard plus exactly those tensors (and `dstrain estimate` says the same), the
run equals plain ZeRO 3 and the single rank, and an unknown type is named."""
import json

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)

STEPS = 6
C, V, T, LAYERS = 32, 256, 16, 2  # dp_tests.MODEL
LAYERNORM = LAYERS * 4 * C + 2 * C  # ln_1, ln_2 (weight, bias) per block; ln_f
EMBEDDING = V * C + T * C  # wte, wpe


def run(tmp_path, tool, name, dp=2, stage=3, **zero):
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, 2 // dp, dp, name, persistence=0)
    config = json.loads(cfg.read_text())
    config["zero_optimization"].update(zero)
    cfg.write_text(json.dumps(config))
    return dp_tests.run_ranks(tool, cfg, model, dp, steps=STEPS), cfg, model


@pytest.mark.parametrize("keys,whole", [
    ({"zero_force_param_types": ["LayerNorm"]}, LAYERNORM),
    ({"zero_allowed_param_types": ["Linear", "attention"]}, LAYERNORM + EMBEDDING),
    ({"zero_force_param_types": ["Embedding"],
      "zero_allowed_param_types": ["Embedding", "Linear", "Attention", "LayerNorm"]}, EMBEDDING),
])
def test_whole_types_cost_their_elements_and_change_nothing(tmp_path, build_dir, tool, keys,
                                                            whole):
    single = dp_tests.run_ranks(tool, *dp_tests.write_job(tmp_path, 0, 2, 2, 1, "single"),
                                1, steps=STEPS)[0]
    plain, _, _ = run(tmp_path, tool, "plain")
    typed, cfg, model = run(tmp_path, tool, "typed", **keys)
    for p, t in zip(plain, typed):
        assert dp_tests.relative_gap(t["losses"], p["losses"]) <= 1e-6
        assert dp_tests.relative_gap(t["losses"], single["losses"]) <= 1e-5
        psi = t["metrics"]["num_parameters"]
        shard = -(-psi // 2)
        mem = {k: v["bytes"] for k, v in t["metrics"]["memory"].items()}
        assert mem["parameters"] == 4 * (shard + whole)
        assert p["metrics"]["memory"]["parameters"]["bytes"] == 4 * shard
    estimate = dp_tests.estimate_memory(build_dir, cfg, model, 2)[3]
    assert estimate["persistent_parameters"] == whole
    assert estimate["parameters_bytes"] == typed[0]["metrics"]["memory"]["parameters"]["bytes"]


def test_an_unknown_type_is_named(tmp_path, tool):
    cfg, model = dp_tests.write_job(tmp_path, 3, 2, 1, 1, "bad")
    config = json.loads(cfg.read_text())
    config["zero_optimization"]["zero_force_param_types"] = ["Conv2d"]
    cfg.write_text(json.dumps(config))
    code, _, err = dp_tests.start_ranks(tool, cfg, model, 1, steps=1)[0]
    assert code != 0
    assert 'zero_force_param_types: unknown layer type "Conv2d"' in err
    assert "Linear, Embedding, LayerNorm, RMSNorm, Attention, CrossAttention" in err
