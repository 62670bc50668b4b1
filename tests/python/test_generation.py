"""Generation and evaluation: dst_generator_* through the Python SDK and the
`dstrain generate` / `dstrain eval` commands.

Oracles: the PyTorch twins written from transformers' formulas
(torch_gpt.py, torch_families.py) with random weights, saved as Hugging Face
directories (hf_files.py). The generator's logits equal the twin's within
1e-5; greedy decoding, with the key/value cache and without it, picks the
argmax of the twin's full forward over the sequence so far at every step; a
checkpoint of any training layout generates what its Hugging Face export
does; the loss `dstrain eval` prints is the twin's over the same windows;
the same seed gives the same tokens in Python as in C (examples/c/same_sample.c;
ctest compares C with Rust).
"""
import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

import hf_files
import pipeline_support as ps
import torch_families
import torch_gpt

REPO = pathlib.Path(__file__).resolve().parents[2]

GPT2 = {"model_type": "gpt2", "vocab_size": 96, "n_positions": 24, "n_ctx": 24, "n_embd": 32,
        "n_layer": 2, "n_head": 4, "activation_function": "gelu_new", "eos_token_id": 5}
LLAMA = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 24, "rope_theta": 10000.0, "tie_word_embeddings": False,
         "eos_token_id": [5, 6]}
BLOOM = {"model_type": "bloom", "vocab_size": 96, "hidden_size": 32, "n_layer": 2, "n_head": 4,
         "seq_length": 24}
CONFIGS = {"gpt2": GPT2, "llama": LLAMA, "bloom": BLOOM}
CONTEXT = 24


@pytest.fixture(scope="module")
def dstrain(build_dir):
    os.environ["DSTRAIN_LIBRARY"] = str(build_dir / "libdstrain.so")
    sys.path.insert(0, str(REPO / "sdk-python" / "src"))
    import dstrain as sdk
    return sdk


def twin(family, seed, scale=0.5):
    if family == "gpt2":
        cfg = GPT2
        model = torch_gpt.GPT(torch_gpt.GPTConfig(cfg["vocab_size"], cfg["n_positions"],
                                                  cfg["n_layer"], cfg["n_head"], cfg["n_embd"]))
    else:
        model = torch_families.model_for(CONFIGS[family])
    return hf_files.randomize_(model, seed, scale)


def model_dir(tmp_path, family, seed=1, config=None):
    config = config or CONFIGS[family]
    model = twin(family, seed) if config is CONFIGS[family] else \
        hf_files.randomize_(torch_families.model_for(config), seed, 0.5)
    directory = tmp_path / family
    hf_files.write_model_dir(directory, config,
                             hf_files.hf_state_dict(model, gpt2=family == "gpt2"))
    return model.double(), directory


def twin_logits(model, tokens):
    with torch.no_grad():
        logits, _ = model(torch.from_numpy(np.asarray(tokens)).long().reshape(1, -1)
                          if np.asarray(tokens).ndim == 1 else torch.from_numpy(tokens).long())
    return logits.numpy()


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_logits_are_the_twins(tmp_path, dstrain, family):
    model, directory = model_dir(tmp_path, family)
    tokens = np.random.default_rng(2).integers(0, 96, size=(3, 17), dtype=np.int32)
    with dstrain.Generator(model=directory, batch=3, threads=1) as g:
        assert g.info["model_type"] == {"gpt2": "gpt"}.get(family, family)
        got = g.logits(tokens)
    want = twin_logits(model, tokens)
    assert got.shape == want.shape == (3, 17, 96)
    # fp32 against float64: within 1e-5 of the logits' scale
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= 1e-5 * scale, (np.abs(got - want).max(), scale)


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_greedy_is_the_twins_argmax_at_every_step(tmp_path, dstrain, family):
    model, directory = model_dir(tmp_path, family, seed=3)
    prompt = [7, 8, 9, 10]
    with dstrain.Generator(model=directory, threads=1) as g:
        cached = g.generate(prompt, 14, temperature=0, stop_at_eos=False)
        uncached = g.generate(prompt, 14, temperature=0, stop_at_eos=False, use_cache=False)
    assert len(cached) == 14 and cached.stop_reason == "length"
    assert list(uncached) == list(cached)
    seq = list(prompt)
    for token in cached:
        logits = twin_logits(model, np.array(seq, dtype=np.int32))[0, -1]
        top = np.sort(logits)[-2:]
        if top[1] - top[0] > 1e-6:  # a tie within rounding decides nothing
            assert token == int(np.argmax(logits)), (len(seq), token, int(np.argmax(logits)))
        seq.append(token)


def test_sampling_streams_stops_and_follows_the_seed(tmp_path, dstrain):
    _, directory = model_dir(tmp_path, "llama", seed=4)
    with dstrain.Generator(model=directory, threads=1) as g:
        assert sorted(g.info["eos_token_ids"]) == [5, 6]
        seen = []
        out = g.generate([1, 2, 3], 10, temperature=0.9, top_k=30, top_p=0.95, seed=7,
                         stop_at_eos=False, on_token=seen.append)
        assert seen == list(out) and len(out) == 10
        again = g.generate([1, 2, 3], 10, temperature=0.9, top_k=30, top_p=0.95, seed=7,
                           stop_at_eos=False, use_cache=False)
        assert list(again) == list(out)
        other = g.generate([1, 2, 3], 10, temperature=0.9, top_k=30, top_p=0.95, seed=8,
                           stop_at_eos=False)
        assert list(other) != list(out)
        stopped = g.generate([1, 2, 3], 10, seed=7, on_token=lambda t: len(seen) < 0)
        assert len(stopped) == 1 and stopped.stop_reason == "caller"
        full = g.generate([1] * 20, 10, temperature=0, stop_at_eos=False)
        assert len(full) == CONTEXT - 20 and full.stop_reason == "context"
        # Hot sampling meets an eos id among 96 within a few seeds.
        reasons = [g.generate([1, 2], 30, temperature=3.0, seed=s).stop_reason for s in range(20)]
        assert "eos" in reasons
        with pytest.raises(dstrain.InvalidArgumentError, match="outside the model's vocabulary"):
            g.generate([1, 96], 4)
        with pytest.raises(dstrain.InvalidArgumentError, match="top_p"):
            g.generate([1], 4, top_p=0)

        def boom(token):
            raise KeyError("from the callback")
        with pytest.raises(KeyError, match="from the callback"):
            g.generate([1], 4, on_token=boom)


def test_any_layouts_checkpoint_generates_what_its_export_does(tmp_path, build_dir, dstrain):
    # the pipeline worker's batches draw from 256 tokens
    model, directory = model_dir(tmp_path, "llama", seed=5, config=dict(LLAMA, vocab_size=256))
    spec = {"type": "hf", "path": str(directory)}
    ps.run_job(tmp_path, ps.make_config(pp=2, tp=2, accum=4), spec, 4, "grid",
               steps=0, build_dir=build_dir, extra=[str(tmp_path / "ckpt"), "0"])
    dstrain.export_checkpoint_hf(tmp_path / "ckpt", tmp_path / "out")
    tokens = np.arange(1, 13, dtype=np.int32)
    with dstrain.Generator(tmp_path / "ckpt", threads=1) as a, \
            dstrain.Generator(model=tmp_path / "out", threads=1) as b, \
            dstrain.Generator(model=directory, threads=1) as c:
        assert np.array_equal(a.logits(tokens), b.logits(tokens))
        assert np.array_equal(a.logits(tokens), c.logits(tokens))
        kw = dict(temperature=0.7, top_k=40, seed=3, stop_at_eos=False)
        assert list(a.generate([4, 5], 12, **kw)) == list(b.generate([4, 5], 12, **kw))


def test_bf16_generation_tracks_fp32(tmp_path, dstrain):
    _, directory = model_dir(tmp_path, "llama", seed=6)
    tokens = np.arange(3, 20, dtype=np.int32)
    with dstrain.Generator(model=directory, threads=1) as f, \
            dstrain.Generator(model=directory, threads=1, precision="bf16") as h:
        a, b = f.logits(tokens), h.logits(tokens)
        la, lb = f.loss(tokens[:-1], tokens[1:]), h.loss(tokens[:-1], tokens[1:])
    assert not np.array_equal(a, b)  # the weights were rounded
    print("bf16 vs fp32: logits", float(np.linalg.norm(a - b) / np.linalg.norm(a)),
          "loss", la, lb)
    assert float(np.linalg.norm(a - b) / np.linalg.norm(a)) < 0.05
    assert abs(la - lb) < 0.02 * la


def test_the_same_seed_samples_the_same_tokens_in_python_and_c(build_dir, dstrain):
    program = build_dir / "tests" / "examples" / "c" / "same_sample"
    if not program.exists():
        pytest.fail(f"{program} is not built (tests/CMakeLists.txt builds it)")
    c_lines = subprocess.run([str(program)], capture_output=True, text=True, check=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1")).stdout.splitlines()
    spec = {"type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 64, "initializer_range": 0.5, "seed": 11}
    with dstrain.Generator(model=spec, threads=1) as g:
        sampled = g.generate([1, 2, 3], 16, temperature=0.8, top_k=20, top_p=0.9, seed=42)
        greedy = g.generate([1, 2, 3], 8, temperature=0.0, seed=42)
    lines = [f"sample {k} id {t}" for k, t in enumerate(sampled)]
    lines += [f"greedy {k} id {t}" for k, t in enumerate(greedy)]
    assert len(sampled) == 16 and len(greedy) == 8
    assert c_lines == lines


def cli(build_dir, *args, check=True, text=True):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([str(build_dir / "dstrain"), *map(str, args)], capture_output=True,
                       text=text, env=env, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_cli_generate_and_eval(tmp_path, build_dir, dstrain):
    model, directory = model_dir(tmp_path, "gpt2", seed=8)
    with dstrain.Generator(model=directory, threads=1) as g:
        want = g.generate([3, 4, 5], 9, temperature=0, stop_at_eos=False)
    r = cli(build_dir, "generate", "--model", directory, "--prompt-tokens", "3,4,5",
            "--max-new-tokens", 9, "--temperature", 0, "--ignore-eos", "--tokens")
    assert r.stdout.strip() == ",".join(map(str, want))
    assert "9 tokens (stopped: length)" in r.stderr and "tokens/s" in r.stderr
    # eval: windows of 8 tokens over a token file, against the twin's loss.
    data = np.random.default_rng(9).integers(0, 96, size=200).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, data.size]
    path = tmp_path / "val.bin"
    path.write_bytes(header.tobytes() + data.tobytes())
    r = cli(build_dir, "eval", "--model", directory, "--data", path, "--seq-len", 8,
            "--batch", 4, "--json")
    out = json.loads(r.stdout)
    windows = (data.size - 1) // 8
    tokens = data[: windows * 8].reshape(windows, 8).astype(np.int64)
    targets = data[1: windows * 8 + 1].reshape(windows, 8).astype(np.int64)
    with torch.no_grad():
        _, loss = model(torch.from_numpy(tokens), torch.from_numpy(targets))
    assert out["tokens"] == windows * 8 and out["windows"] == windows
    assert abs(out["loss"] - loss.item()) <= 1e-5 * loss.item()
    assert abs(out["perplexity"] - math.exp(out["loss"])) <= 1e-9 * out["perplexity"]
    # From a checkpoint, byte-level text: the default GPT spec's vocabulary is 256.
    spec = tmp_path / "gpt.json"
    spec.write_text(json.dumps({"type": "gpt", "vocab_size": 256, "n_ctx": 32, "n_layer": 1,
                                "n_head": 2, "d_model": 16, "seed": 3}))
    with dstrain.Engine({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
                         "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                         "dstrain": {"num_threads": 1}}, str(spec)) as engine:
        engine.save_checkpoint(str(tmp_path / "ckpt"))
    r = cli(build_dir, "generate", "--load", tmp_path / "ckpt", "--prompt", "Hello",
            "--max-new-tokens", 5, "--seed", 1, text=False)
    with dstrain.Generator(tmp_path / "ckpt", threads=1) as g:
        want = g.generate(list(b"Hello"), 5, seed=1)
    assert r.stdout == b"Hello" + bytes(want) + b"\n"  # byte-level: each token one byte
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20)
    r = cli(build_dir, "eval", "--load", tmp_path / "ckpt", "--data", text, "--split", "val")
    assert r.stdout.startswith("loss ") and "perplexity" in r.stdout


def test_cli_errors_are_named(tmp_path, build_dir, dstrain):
    _, directory = model_dir(tmp_path, "llama", seed=10)
    (directory / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece"}}))
    r = cli(build_dir, "generate", "--model", directory, "--prompt", "hi", check=False)
    assert r.returncode == 2 and "tokenizer.json" in r.stderr and "WordPiece" in r.stderr \
        and "not supported yet" in r.stderr, r.stderr
    (directory / "tokenizer.json").unlink()
    r = cli(build_dir, "generate", "--model", directory, "--load", tmp_path, "--prompt-tokens",
            "1", check=False)
    assert r.returncode == 2 and "one of them" in r.stderr
    r = cli(build_dir, "generate", "--model", directory, "--prompt-tokens", "1,200", check=False)
    assert r.returncode == 2 and "outside the model's vocabulary" in r.stderr
    r = cli(build_dir, "generate", "--model", directory, "--prompt-tokens", "1",
            "--context", 100, check=False)
    assert r.returncode == 2 and "the model has 24 positions" in r.stderr
    r = cli(build_dir, "generate", "--load", tmp_path / "nothing", "--prompt-tokens", "1",
            check=False)
    assert r.returncode != 0 and "nothing" in r.stderr
