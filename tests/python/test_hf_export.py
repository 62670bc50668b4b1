"""`dstrain ckpt export DIR --format hf` (and dstrain.export_checkpoint_hf):
a checkpoint as a Hugging Face model directory.

Oracles: (1) import then export gives byte-identical tensors (same names,
shapes, dtype and bytes: F32 as F32, BF16 shards as BF16), from a checkpoint
saved by one rank and by a tp 2 x pp 2 job; (2) after dstrain trains, the
exported files loaded by name into the family's PyTorch twin (GPT-2's
Conv1D transposed back) give dstrain's evaluation loss within 1e-5; (3) the
written config.json is the same model again (dstrain reads the exported
directory back and evaluates the same loss); (4) shards and the index follow
transformers' rule (a new shard where the next tensor would pass the size).
"""
import json
import pathlib
import struct
import subprocess

import numpy as np
import pytest
import torch

import hf_files
import pipeline_support as ps
from test_hf_import import CONFIGS, LLAMA, T, batch, dstrain_sdk, engine_config, twin  # noqa: F401

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2}


def read_safetensors(path):
    """{name: (dtype, shape, bytes)}, read here from the format's spec."""
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    return {name: (e["dtype"], tuple(e["shape"]), data[e["data_offsets"][0]:e["data_offsets"][1]])
            for name, e in header.items()}


def read_dir(directory):
    """Every tensor of a Hugging Face directory (one file or the index's shards)."""
    directory = pathlib.Path(directory)
    index = directory / "model.safetensors.index.json"
    if not index.exists():
        return read_safetensors(directory / "model.safetensors")
    out = {}
    for file in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        out.update(read_safetensors(directory / file))
    return out


def as_torch(dtype, shape, data):
    if dtype == "BF16":
        return torch.from_numpy(np.frombuffer(data, np.int16).copy()).view(torch.bfloat16).reshape(
            shape).float()
    return torch.from_numpy(np.frombuffer(data, {"F32": np.float32, "F16": np.float16}[dtype])
                            .astype(np.float32).reshape(shape))


def save_untrained(dstrain, model_dir, ckpt):
    with dstrain.Engine(engine_config(), str(model_dir)) as engine:
        engine.save_checkpoint(str(ckpt))


@pytest.mark.parametrize("family,dtype,shards", [("gpt2", "F32", 1), ("llama", "BF16", 3),
                                                 ("bloom", "F16", 1)])
def test_import_then_export_is_byte_identical(tmp_path, dstrain_sdk, family, dtype, shards):
    model = twin(family, seed=11)
    state = hf_files.hf_state_dict(model, gpt2=family == "gpt2")
    hf_files.write_model_dir(tmp_path / "in", CONFIGS[family], state, dtype, shards)
    save_untrained(dstrain_sdk, tmp_path / "in", tmp_path / "ckpt")
    export_dtype = {"F32": "fp32", "BF16": "bf16", "F16": "fp16"}[dtype]
    dstrain_sdk.export_checkpoint_hf(tmp_path / "ckpt", tmp_path / "out", dtype=export_dtype)
    assert read_dir(tmp_path / "out") == read_dir(tmp_path / "in")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == CONFIGS[family]["model_type"]
    assert config["torch_dtype"] == {"fp32": "float32", "bf16": "bfloat16",
                                     "fp16": "float16"}[export_dtype]
    assert json.loads((tmp_path / "out" / "generation_config.json").read_text())[
        "_from_model_config"] is True


def test_a_parallel_layouts_checkpoint_exports_the_same_files(tmp_path, build_dir, dstrain_sdk):
    model = twin("llama", seed=12)
    hf_files.write_model_dir(tmp_path / "in", LLAMA, hf_files.hf_state_dict(model), "BF16", 2)
    spec = {"type": "hf", "path": str(tmp_path / "in")}
    ps.run_job(tmp_path, ps.make_config(pp=2, tp=2, accum=4), spec, 4, "grid",
               steps=0, build_dir=build_dir, extra=[str(tmp_path / "ckpt"), "0"])
    dstrain_sdk.export_checkpoint_hf(tmp_path / "ckpt", tmp_path / "out", dtype="bf16")
    assert read_dir(tmp_path / "out") == read_dir(tmp_path / "in")


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_trained_weights_give_pytorch_dstrains_loss(tmp_path, dstrain_sdk, family):
    dstrain = dstrain_sdk
    model = twin(family, seed=13)
    hf_files.write_model_dir(tmp_path / "in", CONFIGS[family],
                             hf_files.hf_state_dict(model, gpt2=family == "gpt2"))
    tokens, targets = batch(21)
    with dstrain.Engine(engine_config(), str(tmp_path / "in")) as engine:
        for step in range(3):
            engine.train_batch(*batch(30 + step))
        trained_loss = engine.eval_batch(tokens=tokens, targets=targets)
        engine.save_checkpoint(str(tmp_path / "ckpt"))
    dstrain.export_checkpoint_hf(tmp_path / "ckpt", tmp_path / "out", max_shard_size="40KB")
    files = read_dir(tmp_path / "out")
    own = dict(model.double().named_parameters())
    with torch.no_grad():
        for name, p in own.items():
            value = as_torch(*files[name]).double()
            p.copy_(value.t() if family == "gpt2" and name.endswith(hf_files.CONV1D) else value)
    _, loss = model(torch.from_numpy(tokens).long(), torch.from_numpy(targets).long())
    assert abs(loss.item() - trained_loss) <= 1e-5 * abs(trained_loss), (loss.item(), trained_loss)
    # config.json is the same model: dstrain reads the export back.
    with dstrain.Engine(engine_config(), str(tmp_path / "out")) as again:
        assert abs(again.eval_batch(tokens=tokens, targets=targets) - trained_loss) <= 1e-6


def test_shards_follow_transformers_rule(tmp_path, dstrain_sdk):
    model = twin("llama", seed=14)
    hf_files.write_model_dir(tmp_path / "in", LLAMA, hf_files.hf_state_dict(model))
    save_untrained(dstrain_sdk, tmp_path / "in", tmp_path / "ckpt")
    limit = 20000
    dstrain_sdk.export_checkpoint_hf(tmp_path / "ckpt", tmp_path / "out", max_shard_size=str(limit))
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-{k:05d}-of-{len(files):05d}.safetensors"
                     for k in range(1, len(files) + 1)]
    sizes = {f: 0 for f in files}
    order = list(read_safetensors(tmp_path / "in" / "model.safetensors"))
    for name in order:
        sizes[index["weight_map"][name]] += int(np.prod(read_dir(tmp_path / "in")[name][1])) * 4
    for k, f in enumerate(files):
        assert sizes[f] <= limit or len(read_safetensors(tmp_path / "out" / f)) == 1
        if k + 1 < len(files):  # the next shard's first tensor would not have fit
            first_next = next(n for n in order if index["weight_map"][n] == files[k + 1])
            nbytes = int(np.prod(read_dir(tmp_path / "in")[first_next][1])) * 4
            assert sizes[f] + nbytes > limit
    assert index["metadata"]["total_size"] == sum(sizes.values())


def test_what_cannot_be_exported_is_named(tmp_path, build_dir, dstrain_sdk):
    dstrain = dstrain_sdk
    model = twin("llama", seed=15)
    state = hf_files.hf_state_dict(model)
    state["model.norm.weight"] = state["model.norm.weight"] * 0 + 1e6  # beyond fp16
    hf_files.write_model_dir(tmp_path / "in", LLAMA, state)
    save_untrained(dstrain, tmp_path / "in", tmp_path / "ckpt")

    with pytest.raises(dstrain.InvalidArgumentError, match="'model.norm.weight' holds 1000000"):
        dstrain.export_checkpoint_hf(tmp_path / "ckpt", tmp_path / "fp16", dtype="fp16")
    assert not (tmp_path / "fp16").exists() and not (tmp_path / "fp16.partial").exists()

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    with pytest.raises(dstrain.InvalidArgumentError, match="exists and is not an empty directory"):
        dstrain.export_checkpoint_hf(tmp_path / "ckpt", tmp_path / "busy")
    assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"

    with pytest.raises(dstrain.InvalidArgumentError, match="shard size \"5 parsecs\""):
        dstrain.export_checkpoint_hf(tmp_path / "ckpt", tmp_path / "x", max_shard_size="5 parsecs")

    seq = {"type": "sequential", "input_dim": 4, "loss": "mse",
           "layers": [{"type": "linear", "out_features": 2}]}
    with dstrain.Engine(engine_config(), seq) as engine:
        engine.save_checkpoint(str(tmp_path / "seq"))
    with pytest.raises(dstrain.NotSupportedError, match="a sequential model has no Hugging Face"):
        dstrain.export_checkpoint_hf(tmp_path / "seq", tmp_path / "seq_out")

    # The CLI: --format hf writes the directory; --dtype alone is refused.
    cli = build_dir / "dstrain"
    done = subprocess.run([str(cli), "ckpt", "export", str(tmp_path / "ckpt"), "--format", "hf",
                           "--out", str(tmp_path / "cli"), "--dtype", "bf16"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert read_dir(tmp_path / "cli")["model.norm.weight"][0] == "BF16"
    refused = subprocess.run([str(cli), "ckpt", "export", str(tmp_path / "ckpt"), "--out",
                              str(tmp_path / "one.safetensors"), "--dtype", "bf16"],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "are for --format hf" in refused.stderr, refused.stderr
