#!/usr/bin/python3
"""Generation throughput: dstrain's key/value-cached decoding against a
PyTorch implementation with its own cache, the same model and weights, side
by side in one run. Prints tokens/s and ratios; asserts nothing.

Model: LLaMA-style (rotary, RMSNorm, SwiGLU, grouped-query attention), vocab
32000, hidden 512, 8 layers, 8 heads (4 key/value), intermediate 1408,
random weights written as a Hugging Face directory (tests/python/hf_files.py)
that both sides read. Each run: a prompt of --prompt tokens, then --new
greedy tokens; "decode" is the tokens after the first divided by their time
(the first waits for the prompt's forward, reported as "prefill").
PyTorch (this file's LLaMA with a cache appended by torch.cat per step, as
transformers' DynamicCache does; the formulas of tests/python/torch_families.py)
runs with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset and again with the core
type fitting this CPU (torch*); the faster is the ratio's peer. Every run is
its own process with the threads pinned, interleaved --repeats times.

    python3 bench/bench_generate.py --build-dir build [--threads 1,2] [--repeats 3]
                                    [--prompt 32] [--new 128]
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import peer_env

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent

CONFIG = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 512,
          "intermediate_size": 1408, "num_hidden_layers": 8, "num_attention_heads": 8,
          "num_key_value_heads": 4, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "tie_word_embeddings": False}


def thread_env(threads, core=None):
    return peer_env.peer_env(threads, core)


def prompt_tokens(n):
    return [(7 * i + 3) % CONFIG["vocab_size"] for i in range(n)]


def timed_generation(step_tokens):
    """Runs the generator `step_tokens` (yielding tokens); returns the
    tokens, the first token's latency and the decode rate of the rest."""
    start = time.perf_counter()
    tokens, first = [], None
    for token in step_tokens():
        tokens.append(token)
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    rate = (len(tokens) - 1) / (end - first) if len(tokens) > 1 else 0.0
    return {"tokens": tokens, "prefill_s": first - start, "decode_tps": rate}


def dstrain_worker(args):
    os.environ["DSTRAIN_LIBRARY"] = str(pathlib.Path(args.build_dir) / "libdstrain.so")
    sys.path.insert(0, str(REPO / "sdk-python" / "src"))
    import dstrain
    with dstrain.Generator(model=args.model_dir, threads=args.worker_threads) as g:
        g.generate(prompt_tokens(args.prompt), 4, temperature=0)  # warm-up
        # the callback sees each token as it comes: timed there
        start = time.perf_counter()
        stamps = []
        g.generate(prompt_tokens(args.prompt), args.new, temperature=0, stop_at_eos=False,
                   on_token=lambda t: stamps.append((t, time.perf_counter())))
        end = time.perf_counter()
        tokens = [t for t, _ in stamps]
        first = stamps[0][1]
        result = {"tokens": tokens, "prefill_s": first - start,
                  "decode_tps": (len(tokens) - 1) / (end - first)}
    print(json.dumps(result))


def load_state(model_dir):
    """{name: float32 tensor} of the directory's model.safetensors."""
    import numpy as np
    import torch
    data = (pathlib.Path(model_dir) / "model.safetensors").read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    state = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=np.float32)
        state[name] = torch.from_numpy(array.copy()).reshape(entry["shape"])
    return state


def cached_llama(state, cfg):
    """A LLaMA forward with a key/value cache, from transformers' formulas:
    returns step(tokens [1, t]) -> logits of the last position, appending to
    its cache."""
    import torch
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import torch_families
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV, hs, L = cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"], \
        cfg["num_hidden_layers"]
    eps = cfg["rms_norm_eps"]
    inv_freq = torch_families.rope_inv_freq(cfg, hs)
    w = state
    cache = [[None, None] for _ in range(L)]

    def rms(x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(var + eps))

    def rotate_half(x):
        return torch.cat((-x[..., hs // 2:], x[..., :hs // 2]), dim=-1)

    position = [0]

    def step(tokens):
        t = tokens.shape[1]
        pos = torch.arange(position[0], position[0] + t).float()
        freqs = pos[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        x = w["model.embed_tokens.weight"][tokens]
        for i in range(L):
            p = f"model.layers.{i}."
            h = rms(x, w[p + "input_layernorm.weight"])
            q = (h @ w[p + "self_attn.q_proj.weight"].t()).view(1, t, H, hs).transpose(1, 2)
            k = (h @ w[p + "self_attn.k_proj.weight"].t()).view(1, t, KV, hs).transpose(1, 2)
            v = (h @ w[p + "self_attn.v_proj.weight"].t()).view(1, t, KV, hs).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if cache[i][0] is not None:
                k = torch.cat((cache[i][0], k), dim=2)
                v = torch.cat((cache[i][1], v), dim=2)
            cache[i] = [k, v]
            kk = k.repeat_interleave(H // KV, dim=1)
            vv = v.repeat_interleave(H // KV, dim=1)
            scores = (q @ kk.transpose(2, 3)) / (hs ** 0.5)
            total = kk.shape[2]
            mask = torch.ones(t, total, dtype=torch.bool).tril(total - t)
            scores = scores.masked_fill(~mask, float("-inf"))
            y = (scores.softmax(-1) @ vv).transpose(1, 2).reshape(1, t, C)
            x = x + y @ w[p + "self_attn.o_proj.weight"].t()
            h = rms(x, w[p + "post_attention_layernorm.weight"])
            gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].t())
            up = h @ w[p + "mlp.up_proj.weight"].t()
            x = x + (gate * up) @ w[p + "mlp.down_proj.weight"].t()
        x = rms(x[:, -1:], w["model.norm.weight"])
        position[0] += t
        return (x @ w["lm_head.weight"].t())[0, -1]

    return step


def torch_run(args):
    import torch
    torch.set_num_threads(args.worker_threads)
    state = load_state(args.model_dir)
    cfg = json.loads((pathlib.Path(args.model_dir) / "config.json").read_text())

    def generate(n):
        step = cached_llama(state, cfg)
        tokens = torch.tensor([prompt_tokens(args.prompt)])
        with torch.inference_mode():
            for _ in range(n):
                token = int(step(tokens).argmax())
                yield token
                tokens = torch.tensor([[token]])

    list(generate(4))  # warm-up
    result = timed_generation(lambda: generate(args.new))
    print(json.dumps(result))


def make_model(directory):
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import hf_files
    import torch_families
    model = hf_files.randomize_(torch_families.model_for(CONFIG), seed=1, scale=0.05)
    hf_files.write_model_dir(directory, CONFIG, hf_files.hf_state_dict(model))


def run(cmd, env, what):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stdout}\n{proc.stderr}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{what}: no result\n{proc.stdout}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=str(REPO / "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--worker", choices=["dstrain", "torch"])
    ap.add_argument("--model-dir")
    ap.add_argument("--worker-threads", type=int, default=1)
    args = ap.parse_args()
    if args.worker == "dstrain":
        return dstrain_worker(args)
    if args.worker == "torch":
        return torch_run(args)

    tuned = peer_env.best_core()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pathlib.Path(tmp) / "llama"
        make_model(model_dir)
        print(f"model: {json.dumps(CONFIG)}\nprompt {args.prompt} tokens, {args.new} greedy "
              f"tokens, {args.repeats} interleaved runs (median [min, max])")
        print(f"{'threads':>7} {'dstrain tok/s':>22} {'torch tok/s':>22} {'torch* tok/s':>22} "
              f"{'ratio':>6}  prefill ms (dstrain / torch)  tokens equal")
        for n in [int(t) for t in args.threads.split(",")]:
            base = [sys.executable, __file__, "--model-dir", str(model_dir), "--prompt",
                    str(args.prompt), "--new", str(args.new), "--worker-threads", str(n),
                    "--build-dir", args.build_dir]
            runs = {"dstrain": [], "torch": [], "torch*": []}
            for _ in range(args.repeats):
                runs["dstrain"].append(run(base + ["--worker", "dstrain"], thread_env(n),
                                           "dstrain"))
                runs["torch"].append(run(base + ["--worker", "torch"], thread_env(n), "torch"))
                if tuned:
                    runs["torch*"].append(run(base + ["--worker", "torch"],
                                              thread_env(n, tuned), "torch*"))

            def cell(rs):
                if not rs:
                    return "-"
                v = [r["decode_tps"] for r in rs]
                return f"{statistics.median(v):.1f} [{min(v):.1f}, {max(v):.1f}]"

            def med(rs, key="decode_tps"):
                return statistics.median(r[key] for r in rs) if rs else 0.0

            peer = max(med(runs["torch"]), med(runs["torch*"]))
            peer_runs = runs["torch*"] if med(runs["torch*"]) > med(runs["torch"]) else runs["torch"]
            same = sum(a == b for a, b in zip(runs["dstrain"][0]["tokens"],
                                              peer_runs[0]["tokens"]))
            print(f"{n:>7} {cell(runs['dstrain']):>22} {cell(runs['torch']):>22} "
                  f"{cell(runs['torch*']):>22} {med(runs['dstrain']) / peer:>5.2f}x  "
                  f"{1e3 * med(runs['dstrain'], 'prefill_s'):.1f} / "
                  f"{1e3 * med(peer_runs, 'prefill_s'):.1f}"
                  f"{'':>16}{same}/{args.new}", flush=True)
        if tuned:
            print(f"torch*: the same PyTorch with OPENBLAS_CORETYPE={tuned}")
        for line in peer_env.machine_lines(args.build_dir):
            print(line)


if __name__ == "__main__":
    main()
