#!/usr/bin/python3
"""dstrain vs PyTorch decoder training throughput on the CPU, side by side in
one run (DESIGN.md section 7). Prints ratios; asserts nothing.

Model (--family): GPT 6 layers, 6 heads, d_model 384, n_ctx 256, vocab 256,
micro-batch 8, AdamW; llama: the same width with 2 key/value heads,
RMSNorm, rotary embeddings and a SwiGLU MLP of 1024 features (LLaMA's 8/3
d_model), the head untied; bloom: the same width with ALiBi and the
embedding LayerNorm (--layers and --width change the depth and the width:
heads of 64). PyTorch runs tests/python/torch_gpt.py or
torch_families.py (Hugging Face's formulas). For each thread count: the fp32 GEMM peak of dstrain's GEMM backend and of
OpenBLAS, and the bf16 GEMM peak where the CPU has AVX512-BF16 (bench/sgemm_peak); then per precision (fp32; bf16 = dstrain
bf16.enabled vs PyTorch's bf16 autocast) dstrain tokens/s (bench/bench_gpt_dstrain,
C ABI) and PyTorch tokens/s (tests/python/torch_gpt.py), interleaved --repeats
times, each in its own process with OPENBLAS_NUM_THREADS and OMP_NUM_THREADS
pinned. PyTorch runs with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE removed from its
environment (column torch) and again with the best OpenBLAS core type for this
CPU (column torch*); the ratio is against the faster (bench/peer_env.py), and
the table ends with the CPU line and both GEMM peaks.

    python3 bench/bench_gpt.py --build-dir build [--family gpt|llama|bloom] [--quick]
                               [--steps S] [--threads 1,2] [--precision fp32,bf16] [--repeats R]
"""

import argparse
import json
import statistics
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import peer_env

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent

MODEL = {
    "type": "gpt",
    "vocab_size": 256,
    "n_ctx": 256,
    "n_layer": 6,
    "n_head": 6,
    "d_model": 384,
    "seed": 1337,
}
FAMILIES = {
    "gpt": MODEL,
    "llama": {"type": "llama", "vocab_size": 256, "hidden_size": 384, "intermediate_size": 1024,
              "num_hidden_layers": 6, "num_attention_heads": 6, "num_key_value_heads": 2,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "seed": 1337},
    "bloom": {"type": "bloom", "vocab_size": 256, "hidden_size": 384, "n_layer": 6, "n_head": 6,
              "seq_length": 256, "seed": 1337},
}
MICRO_BATCH = 8
ADAMW = {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}


def with_width(family, width):
    """The family's width keys for d_model `width`: heads of 64; LLaMA's
    key/value heads a third of the heads and its MLP 8/3 of the width."""
    heads = width // 64
    if family == "gpt":
        return {"d_model": width, "n_head": heads}
    if family == "llama":
        return {"hidden_size": width, "num_attention_heads": heads,
                "num_key_value_heads": heads // 3, "intermediate_size": 8 * width // 3}
    return {"hidden_size": width, "n_head": heads}


def ds_config(threads, precision="fp32"):
    config = {
        "train_batch_size": MICRO_BATCH,
        "train_micro_batch_size_per_gpu": MICRO_BATCH,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": ADAMW},
        "dstrain": {"num_threads": threads},
    }
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    return config


def dims(model):
    """(context, width, vocab, heads, kv heads, head size, MLP GEMM columns, layers)."""
    if model["type"] == "gpt":
        c = model["d_model"]
        return (model["n_ctx"], c, model["vocab_size"], model["n_head"], model["n_head"],
                c // model["n_head"], 2 * 4 * c, model["n_layer"])
    if model["type"] == "llama":
        c, h = model["hidden_size"], model["num_attention_heads"]
        return (model["max_position_embeddings"], c, model["vocab_size"], h,
                model["num_key_value_heads"], c // h, 3 * model["intermediate_size"],
                model["num_hidden_layers"])
    c = model["hidden_size"]
    return (model["seq_length"], c, model["vocab_size"], model["n_head"], model["n_head"],
            c // model["n_head"], 2 * 4 * c, model["n_layer"])


def attention_flops(model=MODEL, batch=MICRO_BATCH):
    """Attention's QK^T and AV over the whole T x T (unmasked), forward: 2*B*H*T*T*hs*2 a layer."""
    t, _, _, h, _, hs, _, layers = dims(model)
    return layers * 2 * batch * h * t * t * hs * 2


def train_flops_per_step(model=MODEL, batch=MICRO_BATCH):
    """The model's matmul FLOPs of one training step: forward linears
    2*N*C*(q, k, v + output projection + MLP columns) per layer, attention
    QK^T and AV in full (unmasked, as PyTorch's eager attention runs them and
    as Megatron's and PaLM's MFU count them), the LM head 2*N*C*V; backward
    is twice the forward."""
    t, c, v, h, kv, hs, mlp, layers = dims(model)
    n = batch * t
    linears = layers * 2 * n * c * ((h + 2 * kv) * hs + h * hs + mlp) + 2 * n * c * v
    return 3 * (linears + attention_flops(model, batch))


CAUSAL_BLOCK = 128  # core/kernels/cpu/attention.h kCausalBlock


def executed_flops_per_step(precision, model=MODEL, batch=MICRO_BATCH):
    """What dstrain's CPU attention multiplies of train_flops_per_step: its
    GEMMs skip the causal mask's blocks above the diagonal (query rows in
    blocks of CAUSAL_BLOCK reach the key columns up to their block's end):
    both halves in fp32, the backward in bf16."""
    t = dims(model)[0]
    kept = sum((min(t, r0 + CAUSAL_BLOCK) - r0) * min(t, r0 + CAUSAL_BLOCK)
               for r0 in range(0, t, CAUSAL_BLOCK)) / (t * t)
    attention = attention_flops(model, batch)
    blocked = 3 * attention if precision == "fp32" else 2 * attention
    return train_flops_per_step(model, batch) - (1 - kept) * blocked


def thread_env(threads):
    """Threads pinned, OpenBLAS's tuning variables removed (bench/peer_env.py)."""
    return peer_env.peer_env(threads)


def last_json_line(text, what):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{what}: no JSON result in its output:\n{text}")


def run(cmd, threads, what, timeout, extra_env=None):
    t0 = time.time()
    env = thread_env(threads)
    env.update(extra_env or {})
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what} failed ({proc.returncode}): {' '.join(map(str, cmd))}\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    print(f"  {what}: {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    return proc.stdout


def torch_worker(args):
    """Runs in a subprocess with the thread env already pinned."""
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import torch

    import torch_families
    import torch_gpt

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    if MODEL["type"] == "gpt":
        model = torch_gpt.gpt2_init_(torch_gpt.GPT(torch_gpt.GPTConfig.from_spec(MODEL)))
    else:  # N(0, 0.02) weights, norms at 1, biases at 0 (transformers' _init_weights)
        model = torch_families.model_for(MODEL)
        norms = (torch.nn.LayerNorm, torch_families.LlamaRMSNorm)
        with torch.no_grad():
            for module in model.modules():
                for name, p in module.named_parameters(recurse=False):
                    if isinstance(module, norms):
                        p.fill_(1.0 if name == "weight" else 0.0)
                    elif name == "bias":
                        p.zero_()
                    else:
                        p.normal_(0.0, 0.02)
    context, _, vocab, *_ = dims(MODEL)
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=ADAMW["lr"],
        betas=tuple(ADAMW["betas"]),
        eps=ADAMW["eps"],
        weight_decay=ADAMW["weight_decay"],
    )
    gen = torch.Generator().manual_seed(1)
    stream = torch.randint(0, vocab, (MICRO_BATCH * context + 1,), generator=gen)
    x = stream[:-1].view(MICRO_BATCH, context)
    y = stream[1:].view(MICRO_BATCH, context)

    def step():
        opt.zero_grad(set_to_none=True)
        if args.precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                _, loss = model(x, y)
        else:
            _, loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times, losses = [], []
    for i in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
        print(f"step {i + 1}: {times[-1]:.3f} s, loss {losses[-1]:.4f}", file=sys.stderr)
    total = sum(times)
    print(
        json.dumps(
            {
                "torch_version": torch.__version__,
                "threads": torch.get_num_threads(),
                "steps": args.steps,
                "mean_step_seconds": total / args.steps,
                "best_step_seconds": min(times),
                "tokens_per_s": MICRO_BATCH * context * args.steps / total,
                "first_loss": losses[0],
                "last_loss": losses[-1],
            }
        )
    )


def find_build_dir(arg):
    candidates = [arg] if arg else []
    if os.environ.get("DSTRAIN_BUILD_DIR"):
        candidates.append(os.environ["DSTRAIN_BUILD_DIR"])
    candidates += [str(REPO / "build"), str(REPO / "build-parity")]
    for c in candidates:
        p = pathlib.Path(c)
        if (p / "bench" / "bench_gpt_dstrain").is_file():
            return p
    sys.exit(
        "bench_gpt.py: no build with bench/bench_gpt_dstrain found (tried "
        + ", ".join(candidates)
        + "); build with `cmake --build BUILD --target bench_gpt_dstrain sgemm_peak` "
        "and pass --build-dir BUILD"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build-dir", help="CMake build dir (default: $DSTRAIN_BUILD_DIR, ./build)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--steps", type=int, help="timed steps per framework (default 5; quick 2)")
    ap.add_argument("--warmup", type=int, help="warm-up steps (default 2; quick 1)")
    ap.add_argument("--quick", action="store_true", help="short run (about a minute)")
    ap.add_argument("--precision", default="fp32,bf16",
                    help="comma-separated: fp32 (both sides), bf16 (dstrain bf16.enabled vs "
                    "PyTorch bf16 autocast); default fp32,bf16")
    ap.add_argument("--family", default="gpt", choices=sorted(FAMILIES),
                    help="the decoder family (default gpt)")
    ap.add_argument("--layers", type=int, default=6,
                    help="transformer blocks (default 6; 24 = the deep shape)")
    ap.add_argument("--width", type=int, default=384,
                    help="d_model, a multiple of 192 (default 384); heads of 64, LLaMA's key/value "
                    "heads a third of them and its MLP 8/3 of the width")
    ap.add_argument("--repeats", type=int, default=1,
                    help="interleaved dstrain/torch runs per row; median [min-max] (default 1)")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps is None:
        args.steps = 2 if args.quick else 5
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2

    global MODEL
    MODEL = dict(FAMILIES[args.family])
    MODEL[{"gpt": "n_layer", "llama": "num_hidden_layers", "bloom": "n_layer"}[args.family]] = \
        args.layers
    if args.width % 192 or args.width <= 0:
        sys.exit(f"bench_gpt.py: --width {args.width}: use a positive multiple of 192 (heads of "
                 "64, LLaMA's key/value heads a third of them)")
    MODEL.update(with_width(args.family, args.width))
    if args.torch_worker:
        args.threads = int(args.threads)
        torch_worker(args)
        return

    build = find_build_dir(args.build_dir)
    threads_list = [int(t) for t in args.threads.split(",") if t.strip()]
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    flops = train_flops_per_step(MODEL)
    context, width, vocab, heads, kv, _, _, layers = dims(MODEL)
    tokens_per_step = MICRO_BATCH * context
    print(
        f"{args.family} {layers}L x {width} ({heads} heads, {kv} key/value), "
        f"context {context}, vocab {vocab}, micro-batch {MICRO_BATCH}, "
        f"AdamW; {flops / 1e9:.1f} GFLOP per training step; "
        f"{args.warmup} warm-up + {args.steps} timed steps, {args.repeats} interleaved "
        f"repeat(s) (median [min-max]); build {build}",
        flush=True,
    )
    rows = []
    timeout = 1800
    with tempfile.TemporaryDirectory(prefix="dst_bench_") as tmp:
        model_path = pathlib.Path(tmp) / "model.json"
        model_path.write_text(json.dumps(MODEL))
        for n in threads_list:
            print(f"threads={n}", file=sys.stderr, flush=True)
            sgemm_cmd = [build / "bench" / "sgemm_peak", "--threads", str(n), "--json"]
            if args.quick:
                sgemm_cmd.append("--quick")
            sgemm = last_json_line(run(sgemm_cmd, n, "sgemm_peak", timeout), "sgemm_peak")
            # PyTorch's BLAS is the system OpenBLAS: it runs as installed and
            # with the best core type for this CPU, and is compared at its faster.
            tuned = peer_env.best_core()
            for precision in precisions:
                config_path = pathlib.Path(tmp) / f"ds_config_t{n}_{precision}.json"
                config_path.write_text(json.dumps(ds_config(n, precision)))
                dst_cmd = [
                    build / "bench" / "bench_gpt_dstrain",
                    "--model", model_path, "--config", config_path,
                    "--warmup", str(args.warmup), "--steps", str(args.steps),
                ]  # fmt: skip
                torch_cmd = [
                    sys.executable, __file__, "--torch-worker", "--threads", str(n),
                    "--precision", precision, "--layers", str(args.layers),
                    "--family", args.family, "--width", str(args.width),
                    "--warmup", str(args.warmup), "--steps", str(args.steps),
                ]  # fmt: skip
                runs = {"dst": [], "torch": [], "tuned": []}
                for _ in range(args.repeats):
                    runs["dst"].append(last_json_line(
                        run(dst_cmd, n, f"dstrain {precision}", timeout), "bench_gpt_dstrain"))
                    runs["torch"].append(last_json_line(
                        run(torch_cmd, n, f"pytorch {precision}", timeout), "torch worker"))
                    if tuned:
                        runs["tuned"].append(last_json_line(
                            run(torch_cmd, n, f"pytorch {precision} OPENBLAS_CORETYPE={tuned}",
                                timeout, {"OPENBLAS_CORETYPE": tuned}), "torch worker"))
                # bf16 rows against the bf16 GEMM the layers use, where the CPU has one.
                bf16_peak = sgemm.get("bf16_peak_gflops", 0.0)
                rows.append(dict(threads=n, precision=precision, fp32_peak=sgemm["peak_gflops"],
                                 peak=bf16_peak if precision == "bf16" and bf16_peak else
                                 sgemm["peak_gflops"],
                                 peak_kind="bf16" if precision == "bf16" and bf16_peak else "fp32",
                                 openblas_peak=sgemm.get("openblas_peak_gflops", 0.0),
                                 tuned_core=tuned, sgemm=sgemm, **runs))

    def tps(results):
        return [r["tokens_per_s"] for r in results]

    def spread(values):
        return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"

    print()
    head = (
        f"{'threads':>7} {'prec':>5} {'dstrain tok/s':>20} {'torch tok/s':>20} "
        f"{'torch* tok/s':>20} {'dst/best torch':>14} {'dst/peak':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        dst, tor, tun = tps(r["dst"]), tps(r["torch"]), tps(r["tuned"])
        dst_gflops = flops * statistics.median(dst) / tokens_per_step / 1e9
        best = max(statistics.median(tor), statistics.median(tun) if tun else 0.0)
        print(
            f"{r['threads']:>7} {r['precision']:>5} {spread(dst):>20} {spread(tor):>20} "
            f"{spread(tun) if tun else '-':>20} {statistics.median(dst) / best:>14.2f} "
            f"{dst_gflops / r['peak']:>9.3f}"
        )
    print()
    for r in rows:
        d, t = r["dst"][0], r["torch"][0]
        print(
            f"threads {r['threads']} {r['precision']}: dst/peak against the {r['peak_kind']} GEMM "
            f"peak {r['peak']:.1f} GFLOP/s (fp32 {r['fp32_peak']:.1f}) "
            f"(OpenBLAS alone {r['openblas_peak']:.1f}); loss first/last timed step  dstrain "
            f"{d['first_loss']:.4f}/{d['last_loss']:.4f}  torch "
            f"{t['first_loss']:.4f}/{t['last_loss']:.4f} (same model, different init)"
        )
    executed = {r["precision"]: executed_flops_per_step(r["precision"], MODEL) for r in rows}
    print("dst/peak counts the model's FLOPs, attention's QK^T and AV over the whole T x T; "
          "dstrain's attention skips the causal mask's blocks, so it executes "
          + ", ".join(f"{executed[p] / 1e9:.1f} GFLOP in {p}" for p in executed)
          + f" of the {flops / 1e9:.1f}: its executed share of the peak is dst/peak x "
          + ", ".join(f"{executed[p] / flops:.3f} ({p})" for p in executed))
    if any(r["tuned"] for r in rows):
        print(f"torch*: the same PyTorch with OPENBLAS_CORETYPE={rows[0]['tuned_core']}; "
              "dst/best torch is against the faster of torch and torch*")
    for line in peer_env.machine_lines(build, rows[0]["threads"], rows[0]["sgemm"]):
        print(line)


if __name__ == "__main__":
    main()
