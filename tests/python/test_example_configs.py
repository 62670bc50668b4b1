"""Every ds_config under examples/configs/ trains as written (a few steps of
the tiny GPT on two ranks, and the sequential model on one), the tiny LLaMA
and BLOOM specs train, and the GPT-2 124M spec is estimated (the paper-scale
LLaMA and BLOOM specs: test_estimate_families.py), so none of the examples
users copy rots."""
import json
import pathlib
import subprocess

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "configs"
DS_CONFIGS = sorted(p for p in CONFIGS.glob("*.json")
                    if "train_batch_size" in json.loads(p.read_text()))


def test_there_are_configs_and_models():
    assert len(DS_CONFIGS) >= 5
    for model in ("gpt_tiny.json", "gpt2_124m.json", "sequential_linear_relu.json",
                  "llama_tiny.json", "bloom_tiny.json", "llama2_7b.json", "llama2_70b.json",
                  "llama3_8b.json", "bloom_176b.json"):
        assert (CONFIGS / model).exists()


@pytest.mark.parametrize("config", DS_CONFIGS, ids=lambda p: p.stem)
def test_each_example_config_trains_as_written(tmp_path, tool, config, monkeypatch):
    monkeypatch.chdir(tmp_path)  # csv_monitor writes ./metrics
    runs = dp_tests.run_ranks(tool, config, CONFIGS / "gpt_tiny.json", 2, steps=4)
    for r in runs:
        assert len(r["losses"]) == 4 and all(l == l for l in r["losses"]), r["losses"]


@pytest.mark.parametrize("model", ["llama_tiny.json", "bloom_tiny.json"])
def test_the_llama_and_bloom_examples_train(tmp_path, tool, model):
    runs = dp_tests.run_ranks(tool, CONFIGS / "zero2_fp16.json", CONFIGS / model, 2, steps=4)
    for r in runs:
        assert len(r["losses"]) == 4 and all(l == l for l in r["losses"]), r["losses"]


def test_the_sequential_model_trains_with_an_example_config(tmp_path, tool):
    run = dp_tests.run_ranks(tool, CONFIGS / "zero1_fp32.json",
                             CONFIGS / "sequential_linear_relu.json", 1, steps=4)[0]
    assert len(run["losses"]) == 4


def test_gpt2_124m_is_estimated_on_four_ranks(build_dir):
    out = subprocess.run([str(build_dir / "dstrain"), "estimate", "--world-size", "4", "--config",
                          str(CONFIGS / "zero3_bf16.json"), "--model",
                          str(CONFIGS / "gpt2_124m.json"), "--json"],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert 123_000_000 < report["num_parameters"] < 126_000_000, report["num_parameters"]
