"""LLaMA and BLOOM with the engine's other features, each against the same
family's run without it:

- NVMe offload (ZeRO-3: the optimizer state and the parameter shard in swap
  files) reproduces the resident run's losses bit for bit (the same
  arithmetic on the same numbers; only where the state rests differs).
- bf16_override_modules / fp16_override_modules listing every layer type the
  family has (LLaMA: Embedding, RMSNorm, Attention, Linear; BLOOM: LayerNorm
  for RMSNorm) trains as the fp32 run, loss for loss; listing RMSNorm alone
  keeps LLaMA's norm weights and gradients in fp32 (the memory report's
  bytes, exact).
- fp16 with dynamic loss scaling at dp 2 / ZeRO 2 equals the fp16 single rank.
- The pipeline's partition_method "type:<family layer kind>" places the
  decoder layers by their kind and equals the single rank.
"""
import json

import pytest

import families_layouts as fl
import pipeline_support as ps
import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)
from test_mixed_precision import precision_job
from test_offload import losses, offload_job

FAMILIES = {"llama": fl.LLAMA, "bloom": fl.BLOOM}
# The layer types of each family (core/layers/module_type.cc).
TYPES = {"llama": ["Embedding", "RMSNorm", "Attention", "Linear"],
         "bloom": ["Embedding", "LayerNorm", "Attention", "Linear"]}
LAYER_KIND = {"llama": "llama_transformer_layer", "bloom": "bloom_transformer_block"}
STEPS = 5


def with_family(model_path, family):
    """The job's model file rewritten as the family's tiny spec (context 16,
    as the GPT job's)."""
    model_path.write_text(json.dumps(FAMILIES[family]))
    return model_path


def nvme_job(tmp_path, family, name, precision, offload):
    cfg, model = offload_job(tmp_path, 3, 1, name, precision, device="nvme" if offload else None)
    config = json.loads(cfg.read_text())
    zero = config["zero_optimization"]
    zero["stage3_param_persistence_threshold"] = 64  # the matrices partitioned and gathered
    if offload:
        swap = tmp_path / f"params_{name}"
        swap.mkdir(exist_ok=True)
        zero["offload_param"] = {"device": "nvme", "nvme_path": str(swap), "buffer_count": 3,
                                 "max_in_cpu": 0, "pin_memory": True}
    cfg.write_text(json.dumps(config))
    return cfg, with_family(model, family)


@pytest.mark.parametrize("family,precision", [("llama", "fp32"), ("bloom", "bf16")])
def test_nvme_offload_reproduces_the_resident_run(tmp_path, tool, family, precision):
    cfg, model = nvme_job(tmp_path, family, "resident", precision, offload=False)
    resident = dp_tests.run_ranks(tool, cfg, model, 1, steps=STEPS)
    cfg, model = nvme_job(tmp_path, family, "nvme", precision, offload=True)
    offloaded = dp_tests.run_ranks(tool, cfg, model, 1, steps=STEPS)
    assert losses(offloaded) == losses(resident)
    p = offloaded[0]["metrics"]["offload"]["param"]
    assert p["device"] == "nvme" and p["swapped_elements"] > 0 and p["committed_step"] == STEPS
    assert offloaded[0]["metrics"]["offload"]["optimizer"]["device"] == "nvme"


def override_run(tmp_path, tool, family, precision, name, modules=None):
    cfg, model = precision_job(tmp_path, precision, 0, 1, name)
    if modules is not None:
        config = json.loads(cfg.read_text())
        config[precision][f"{precision}_override_modules"] = modules
        cfg.write_text(json.dumps(config))
    return dp_tests.run_ranks(tool, cfg, with_family(model, family), 1, steps=STEPS)[0]


@pytest.mark.parametrize("family,precision", [("llama", "bf16"), ("bloom", "fp16")])
def test_every_layer_type_listed_trains_as_the_fp32_run(tmp_path, tool, family, precision):
    fp32 = override_run(tmp_path, tool, family, "fp32", "fp32")
    listed = override_run(tmp_path, tool, family, precision, "listed", TYPES[family])
    assert listed["metrics"]["precision"] == precision and listed["metrics"]["skipped_steps"] == 0
    assert listed["losses"] == fp32["losses"]


def test_rmsnorm_listed_keeps_the_norm_weights_in_fp32(tmp_path, tool):
    """Memory as the GPT's listed LayerNorm (test_override_modules.py): the
    fp32 tensors and their fp32 gradients beside the 16-bit rest."""
    plain = override_run(tmp_path, tool, "llama", "bf16", "plain")
    listed = override_run(tmp_path, tool, "llama", "bf16", "rmsnorm", ["RMSNorm"])
    m = fl.LLAMA
    norm_elements = (2 * m["num_hidden_layers"] + 1) * m["hidden_size"]  # two a layer, model.norm
    assert listed["metrics"]["fp32_modules"] == ["RMSNorm"]
    assert listed["metrics"]["fp32_parameters"] == norm_elements
    mem = {k: v["bytes"] for k, v in listed["metrics"]["memory"].items()}
    base = {k: v["bytes"] for k, v in plain["metrics"]["memory"].items()}
    assert mem["parameters"] == base["parameters"] + 4 * norm_elements
    assert mem["gradients"] == base["gradients"] + 4 * norm_elements
    assert listed["losses"] != plain["losses"]  # the norms now compute in fp32


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fp16_data_parallel_equals_the_fp16_single_rank(tmp_path, build_dir, family):
    fl.check(tmp_path, build_dir, FAMILIES[family], f"{family} fp16 dp 2, ZeRO 2", dp=2,
             stage=2, precision="fp16")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_partition_by_layer_kind_equals_the_single_rank(tmp_path, build_dir, family):
    fl.check(tmp_path, build_dir, FAMILIES[family], f"{family} pp 2, type partition", pp=2,
             partition=f"type:{LAYER_KIND[family]}")
