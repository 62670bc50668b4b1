"""Hugging Face model directories as a run's model and initial weights:
`{"type": "hf", "path": DIR}` (or a directory given as the model path)
reads DIR/config.json as the spec and DIR's safetensors weights.

Oracle: a PyTorch implementation of the family written from transformers'
formulas (torch_gpt.py, torch_families.py) with random weights, saved in
the family's Hugging Face names and layouts (GPT-2's Conv1D transposed to
[in, out], the base model's unprefixed names, F32 / F16 / BF16, one file or
shards with an index) by this test's own safetensors writer (hf_files.py).
dstrain's first loss and every gradient equal PyTorch's on the weights as
stored within 1e-5 (relative; the norm of the difference over the norm of
the gradient); at tp 2 x pp 2 the run equals the single rank's. A file that
does not fit is refused naming the tensors, both shapes, or the file.
"""
import json
import pathlib
import sys

import numpy as np
import pytest
import torch

import hf_files
import pipeline_support as ps
import torch_families
import torch_gpt

REPO = pathlib.Path(__file__).resolve().parents[2]

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 256,
        "n_positions": 16, "n_ctx": 16, "n_embd": 32, "n_layer": 2, "n_head": 4,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0,
        "embd_pdrop": 0.0, "attn_pdrop": 0.0, "bos_token_id": 0, "eos_token_id": 0}
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 256,
         "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
         "hidden_act": "silu", "torch_dtype": "float32"}
BLOOM = {"model_type": "bloom", "architectures": ["BloomForCausalLM"], "vocab_size": 256,
         "hidden_size": 32, "n_layer": 2, "n_head": 4, "seq_length": 16,
         "layer_norm_epsilon": 1e-5}
CONFIGS = {"gpt2": GPT2, "llama": LLAMA, "bloom": BLOOM}
T = 16


@pytest.fixture(scope="module")
def dstrain_sdk(build_dir):
    import os
    os.environ["DSTRAIN_LIBRARY"] = str(build_dir / "libdstrain.so")
    sys.path.insert(0, str(REPO / "sdk-python" / "src"))
    import dstrain
    return dstrain


def twin(family, seed):
    """The family's PyTorch twin with random weights (float64 for the reference)."""
    if family == "gpt2":
        cfg = GPT2
        model = torch_gpt.GPT(torch_gpt.GPTConfig(cfg["vocab_size"], cfg["n_positions"],
                                                  cfg["n_layer"], cfg["n_head"], cfg["n_embd"]))
    else:
        model = torch_families.model_for(CONFIGS[family])
    return hf_files.randomize_(model, seed)


def engine_config(micro=2):
    return {"train_batch_size": micro, "train_micro_batch_size_per_gpu": micro,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "dstrain": {"num_threads": 1}}


def batch(seed, vocab=256, n=2):
    g = np.random.default_rng(seed)
    tokens = g.integers(0, vocab, size=(n, T), dtype=np.int32)
    return tokens, np.roll(tokens, -1, axis=1).astype(np.int32)


def reference(model, stored, tokens, targets, rename=None):
    """PyTorch's loss and gradients (float64) with the weights as stored
    (GPT-2's Conv1D weights transposed back)."""
    model = model.double()
    own = dict(model.named_parameters())
    gpt2 = isinstance(model, torch_gpt.GPT)
    with torch.no_grad():
        for name, p in own.items():
            value = stored[rename(name) if rename else name].double()
            p.copy_(value.t() if gpt2 and name.endswith(hf_files.CONV1D) else value)
    model.zero_grad()
    _, loss = model(torch.from_numpy(tokens).long(), torch.from_numpy(targets).long())
    loss.backward()
    return loss.item(), {name: p.grad.numpy() for name, p in own.items()}


def norm_rel(got, want):
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def check_against_twin(dstrain, directory, model, stored, tokens, targets, rename=None,
                       tol=1e-5):
    want_loss, want_grads = reference(model, stored, tokens, targets, rename)
    with dstrain.Engine(engine_config(), str(directory)) as engine:
        loss = engine.forward_backward(tokens=tokens, targets=targets)
        assert abs(loss - want_loss) <= tol * abs(want_loss), (loss, want_loss)
        names = {p.name for p in engine.parameters()}
        assert names == set(want_grads), sorted(names ^ set(want_grads))
        for name, want in want_grads.items():
            got = engine.get_grad(name)
            assert norm_rel(got, want) <= tol, (name, norm_rel(got, want))


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_a_hugging_face_directory_gives_pytorchs_loss_and_gradients(tmp_path, dstrain_sdk,
                                                                      family):
    model = twin(family, seed=1)
    state = hf_files.hf_state_dict(model, gpt2=family == "gpt2")
    stored = hf_files.write_model_dir(tmp_path / family, CONFIGS[family], state)
    tokens, targets = batch(2)
    check_against_twin(dstrain_sdk, tmp_path / family, model, stored, tokens, targets)


def test_sharded_bf16_and_the_base_models_names(tmp_path, dstrain_sdk):
    """LLaMA in three BF16 shards with an index, saved from LlamaModel's names
    (no "model." prefix) plus lm_head; GPT-2 in F16 without "transformer."
    and with its attention-mask buffers (ignored)."""
    model = twin("llama", seed=3)
    state = hf_files.hf_state_dict(model, prefix_dropped=True)
    stored = hf_files.write_model_dir(tmp_path / "llama", LLAMA, state, "BF16", shards=3)
    assert len(list((tmp_path / "llama").glob("model-*.safetensors"))) == 3
    tokens, targets = batch(4)
    unprefixed = lambda name: name[len("model."):] if name.startswith("model.") else name  # noqa
    check_against_twin(dstrain_sdk, tmp_path / "llama", model, stored, tokens, targets, unprefixed)

    model = twin("gpt2", seed=5)
    state = hf_files.hf_state_dict(model, gpt2=True, prefix_dropped=True)
    for layer in range(GPT2["n_layer"]):  # GPT-2's causal-mask buffers
        state[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
        state[f"h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)
    stored = hf_files.write_model_dir(tmp_path / "gpt2", GPT2, state, "F16")
    unprefixed = lambda name: name[len("transformer."):]  # noqa: E731
    check_against_twin(dstrain_sdk, tmp_path / "gpt2", model, stored, tokens, targets, unprefixed)


def test_any_layout_starts_from_the_same_weights(tmp_path, build_dir):
    """tp 2 x pp 2 (each rank reading only its tensors) trains as the single
    rank does from the same directory (pipeline_support's equivalence)."""
    model = twin("llama", seed=7)
    hf_files.write_model_dir(tmp_path / "llama", LLAMA,
                             hf_files.hf_state_dict(model), "BF16", shards=2)
    spec = {"type": "hf", "path": str(tmp_path / "llama")}
    ref = ps.run_job(tmp_path, ps.make_config(accum=4), spec, 1, "single", build_dir=build_dir)
    grid = ps.run_job(tmp_path, ps.make_config(pp=2, tp=2, accum=4), spec, 4, "grid",
                      build_dir=build_dir)
    assert {(r["pp_rank"], r["tp_rank"]) for r in grid} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    ps.assert_equivalent(grid, ref[0], "fp32", "hf llama tp 2 x pp 2", 5e-5)
    # And the weights are the file's, not the seed's.
    assert ref[0]["init_params"] != ps.run_job(
        tmp_path, ps.make_config(accum=4), dict(LLAMA, type="llama", seq_length=T), 1,
        "seeded", build_dir=build_dir)[0]["init_params"]


def errors(dstrain, directory):
    with pytest.raises(dstrain.DstrainError) as failed:
        dstrain.Engine(engine_config(), str(directory)).close()
    return str(failed.value)


def test_files_that_do_not_fit_are_named(tmp_path, dstrain_sdk):
    dstrain = dstrain_sdk
    model = twin("llama", seed=9)
    state = hf_files.hf_state_dict(model)

    missing = dict(state)
    del missing["model.layers.1.mlp.up_proj.weight"]
    missing["model.layers.0.self_attn.extra.weight"] = torch.zeros(2)
    hf_files.write_model_dir(tmp_path / "missing", LLAMA, missing)
    msg = errors(dstrain, tmp_path / "missing")
    assert "lacks 1 tensor(s) the model needs ('model.layers.1.mlp.up_proj.weight')" in msg, msg
    assert "has 1 tensor(s) the model does not ('model.layers.0.self_attn.extra.weight')" in msg

    shaped = dict(state, **{"model.norm.weight": torch.ones(31)})
    hf_files.write_model_dir(tmp_path / "shaped", LLAMA, shaped)
    msg = errors(dstrain, tmp_path / "shaped")
    assert "tensor 'model.norm.weight' has shape [31] but this model's is [32]" in msg, msg

    hf_files.write_model_dir(tmp_path / "cut", LLAMA, state)
    weights = tmp_path / "cut" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    msg = errors(dstrain, tmp_path / "cut")
    assert str(weights) in msg and "truncated" in msg, msg

    pickle = tmp_path / "pickle"
    pickle.mkdir()
    (pickle / "config.json").write_text(json.dumps(LLAMA))
    (pickle / "pytorch_model.bin").write_bytes(b"\x80\x02")
    msg = errors(dstrain, pickle)
    assert "pytorch_model.bin" in msg and "safe_serialization=True" in msg, msg

    nothing = tmp_path / "nothing"
    nothing.mkdir()
    (nothing / "config.json").write_text(json.dumps(LLAMA))
    msg = errors(dstrain, nothing)
    assert "neither model.safetensors nor model.safetensors.index.json" in msg, msg

    hf_files.write_model_dir(tmp_path / "index", LLAMA, state, shards=2)
    index_path = tmp_path / "index" / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors"
    index_path.write_text(json.dumps(index))
    msg = errors(dstrain, tmp_path / "index")
    assert ("puts tensor 'model.norm.weight' in model-00001-of-00002.safetensors, which has no "
            "such tensor") in msg, msg
    (tmp_path / "index" / "model-00001-of-00002.safetensors").unlink()
    msg = errors(dstrain, tmp_path / "index")
    assert "shard model-00001-of-00002.safetensors of" in msg and "cannot open" in msg, msg

    no_config = tmp_path / "no_config"
    no_config.mkdir()
    msg = errors(dstrain, no_config)
    assert "config.json" in msg, msg
