"""`dstrain estimate` for the LLaMA and BLOOM families: at small scale every
rank's memory equals the estimate to the byte (model state and
activations, measured by a run); at paper scale (LLaMA-2 7B and 70B,
Llama 3 8B, BLOOM-176B as their config.json files are written) the
parameter counts are the published ones, every dp x tp x pp layout of 64
ranks is listed with its bytes, the layouts tensor parallelism cannot split
are named, and a budget gets a suggestion."""
import json
import pathlib

import pytest

import families_layouts as fl
import pipeline_support as ps
from test_estimate_layouts import estimate

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "configs"


@pytest.mark.parametrize("family,dp,tp,pp,stage,kw", [
    ("llama", 1, 2, 2, 1, {"precision": "bf16"}),
    ("llama", 2, 2, 1, 3, {"sp": True, "recompute": "selective"}),
    ("bloom", 1, 2, 2, 2, {"schedule": "zb-h1", "precision": "fp16"}),
    ("bloom", 2, 1, 2, 0, {"recompute": True}),
])
def test_rank_memory_equals_the_estimate_to_the_byte(tmp_path, build_dir, family, dp, tp, pp,
                                                     stage, kw):
    spec = fl.LLAMA if family == "llama" else fl.BLOOM
    config = ps.make_config(dp=dp, tp=tp, pp=pp, accum=8 // dp, stage=stage, **kw)
    world = dp * tp * pp
    reports = ps.run_job(tmp_path, config, spec, world, "memory", steps=1, build_dir=build_dir)
    out = json.loads(estimate(build_dir, tmp_path, config, spec, world, "--json").stdout)
    stages = out["pipeline"]["ranks"] if pp > 1 else [out["per_rank"]]
    for r in reports:
        rest = r["memory_at_rest"]
        expected = stages[r["pp_rank"]]
        assert rest["parameters"] + rest["gradients"] + rest["optimizer_state"] == \
            expected["model_state_bytes"], (r["rank"], rest, expected)
        assert rest["activations"] == expected["activation_bytes"], (r["rank"], rest, expected)


def llama_parameters(c):
    """LlamaForCausalLM's parameter count from its config."""
    h, kv, hidden = c["num_attention_heads"], c.get("num_key_value_heads"), c["hidden_size"]
    hs = c.get("head_dim") or hidden // h
    kv = kv or h
    layer = (2 * hidden + hidden * h * hs + 2 * hidden * kv * hs + h * hs * hidden +
             3 * hidden * c["intermediate_size"])
    embeddings = c["vocab_size"] * hidden * (1 if c.get("tie_word_embeddings") else 2)
    return embeddings + c["num_hidden_layers"] * layer + hidden


def bloom_parameters(c):
    hidden = c["hidden_size"]
    layer = 4 * hidden + (3 * hidden * hidden + 3 * hidden) + (hidden * hidden + hidden) + \
        (4 * hidden * hidden + 4 * hidden) + (4 * hidden * hidden + hidden)
    return c["vocab_size"] * hidden + 2 * hidden + c["n_layer"] * layer + 2 * hidden


# The parameter counts their model cards publish.
PAPER = [("llama2_7b.json", 6_738_415_616), ("llama2_70b.json", 68_976_648_192),
         ("llama3_8b.json", 8_030_261_248), ("bloom_176b.json", 176_247_271_424)]


def paper_config():
    return json.loads((CONFIGS / "paper_scale_bf16.json").read_text())


@pytest.mark.parametrize("name,published", PAPER, ids=[p[0] for p in PAPER])
def test_paper_scale_models_are_estimated_in_every_layout(tmp_path, build_dir, name, published):
    spec = json.loads((CONFIGS / name).read_text())
    count = bloom_parameters(spec) if spec["model_type"] == "bloom" else llama_parameters(spec)
    assert count == published
    out = json.loads(estimate(build_dir, tmp_path, paper_config(), spec, 64, "--json").stdout)
    assert out["num_parameters"] == published
    layouts = out["layouts"]
    assert sorted((l["dp"], l["tp"], l["pp"]) for l in layouts) == sorted(
        (64 // (t * p), t, p) for t in (1, 2, 4, 8, 16, 32, 64) for p in (1, 2, 4, 8, 16, 32, 64)
        if 64 % (t * p) == 0)
    kv_heads = spec.get("num_key_value_heads") or spec.get("num_attention_heads") or spec["n_head"]
    for l in layouts:
        if l["tp"] > kv_heads or (kv_heads % l["tp"]):
            assert "does not divide into tensor-parallel size" in l["error"], l
        elif l["pp"] <= spec.get("num_hidden_layers", spec.get("n_layer")):
            assert l["peak_bytes"] > 0, l
    # ZeRO 1 in bf16 at dp 64 x tp 1 x pp 1: 2 + 2 bytes a parameter for the
    # bf16 weights and gradients, 12 for the fp32 masters and Adam's moments
    # split over 64 ranks (each rank's share of the flat buffer, padded to 64).
    dp64 = next(l for l in layouts if (l["dp"], l["tp"], l["pp"]) == (64, 1, 1))
    padded = -(-published // 64) * 64
    assert dp64["stages"][0]["model_state_bytes"] == 4 * padded + 12 * (padded // 64)


def test_a_budget_gets_the_most_data_parallel_layout_that_fits(tmp_path, build_dir):
    spec = json.loads((CONFIGS / "llama2_70b.json").read_text())
    text = estimate(build_dir, tmp_path, paper_config(), spec, 64, "--memory-per-rank",
                    "80GiB").stdout
    assert "suggested: dp 8 x tp 1 x pp 8" in text, text
    assert "num_key_value_heads 8 does not divide into tensor-parallel size 16" in text, text
