#!/usr/bin/python3
"""bench_gpu: GPT-2 124M's forward + backward on one CUDA device (issue 16):
dstrain's model through its CUDA kernel backend (build/bench/bench_gpu_model)
against the same model in PyTorch (tests/python/torch_gpt.py, unfused
attention as dstrain's, bf16 autocast or fp32), interleaved --repeats times;
tokens/s, TFLOP/s and MFU against the device's dense peak, median with the
spread, and dstrain / torch (> 1: dstrain is faster).

Both sides time the model's share of a step: gradients cleared, forward with
the loss read back, backward, the device synchronised; no optimizer step
(fused AdamW over 124M parameters is ~1 ms: bench_gpu_kernels.py). FLOPs per
step are 3 x the forward's (every GEMM 2mnk, attention over the full T x T),
the same count for both.

Usage: python3 bench/bench_gpu.py [--build-dir build] [--repeats 3]
       [--steps 10] [--precisions bf16,fp32] [--batch 8] [--layers 12]
       [--device cpu]   (the same through the CPU backend: a check without a GPU)
       [--engine [--zero 1] [--offload optimizer|infinity]]   the whole
           training step instead: `dstrain train` with dstrain.device "cuda"
           (AdamW, the ZeRO stage given; ZeRO-Offload: the optimizer on the
           host, pinned transfers; ZeRO-Infinity: the parameter shard too, at
           ZeRO 3), tokens/s and MFU from its per-step metrics log, warm-up
           steps dropped; beside it PyTorch's whole step, eager (bf16
           autocast, clipping, fused AdamW), with torch_gpt's unfused
           attention and with scaled_dot_product_attention
           (--device standin --vocab 256 --layers 1 --ctx 64: on the guarded
           stand-in, a check without a GPU)
The peer needs a CUDA PyTorch on the machine (python3 on PATH); without one
only dstrain's figures are printed.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
GPT2 = {"vocab_size": 50257, "n_ctx": 1024, "n_layer": 12, "n_head": 12, "d_model": 768}


def dstrain_run(args, precision):
    cmd = [str(pathlib.Path(args.build_dir) / "bench" / "bench_gpu_model"),
           "--layers", str(args.layers), "--heads", str(GPT2["n_head"]),
           "--d-model", str(GPT2["d_model"]), "--ctx", str(args.ctx),
           "--vocab", str(GPT2["vocab_size"]), "--batch", str(args.batch),
           "--steps", str(args.steps), "--warmup", "2", "--compute", precision,
           "--device", args.device]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit(f"bench_gpu: {' '.join(cmd)} failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def timed_steps(step, steps):
    """Seconds a call of `step` takes (the mean over `steps` calls after two
    warm-up calls), and the last call's return value."""
    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        value = step()
    return (time.perf_counter() - t0) / steps, value


def torch_run(args, precision, flops_per_step, peak):
    """The same model in PyTorch on cuda:0; None without a CUDA PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or args.device != "cuda":
        return None
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import torch_gpt

    spec = dict(GPT2, type="gpt", n_layer=args.layers, n_ctx=args.ctx, seed=1)
    cfg = torch_gpt.GPTConfig.from_spec(spec)
    model = torch_gpt.gpt2_init_(torch_gpt.GPT(cfg)).cuda()
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (args.batch, args.ctx), generator=gen).cuda()
    y = torch.randint(0, cfg.vocab_size, (args.batch, args.ctx), generator=gen).cuda()

    def step():
        model.zero_grad(set_to_none=False)
        if precision == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                _, loss = model(x, y)
        else:
            _, loss = model(x, y)
        value = loss.item()
        loss.backward()
        torch.cuda.synchronize()
        return value

    step_s, loss = timed_steps(step, args.steps)
    tflops = flops_per_step / step_s / 1e12
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "step_ms": step_s * 1e3, "tokens_per_s": args.batch * args.ctx / step_s,
            "tflops": tflops, "mfu": tflops / peak if peak else 0.0, "loss": loss}


def engine_run(args, precision, tmp, attention="auto"):
    """`dstrain train` on the device: the step's tokens/s and achieved FLOP/s
    (median over the steps after the first two) from the rank's JSON-lines
    metrics log."""
    model = dict(GPT2, type="gpt", n_layer=args.layers, n_ctx=args.ctx, vocab_size=args.vocab,
                 seed=1)
    config = {"train_micro_batch_size_per_gpu": args.batch, "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
              "zero_optimization": {"stage": args.zero},
              "dstrain": {"device": "cuda",
                          "monitor": {"log": {"enabled": True, "path": str(tmp / "log"),
                                              "format": "jsonl"}}}}
    if precision != "fp32":
        config[precision] = {"enabled": True}
    if args.offload:
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if args.offload == "infinity":
        config["zero_optimization"]["offload_param"] = {"device": "cpu", "pin_memory": True}
    (tmp / "model.json").write_text(json.dumps(model))
    (tmp / "ds.json").write_text(json.dumps(config))
    env = dict(os.environ, DSTRAIN_CUDA_ATTENTION=attention)
    env.pop("DSTRAIN_TEST_DEVICE", None)
    if args.device == "standin":
        env["DSTRAIN_TEST_DEVICE"] = "guarded"
    cmd = [str(pathlib.Path(args.build_dir) / "dstrain"), "train", "--config", str(tmp / "ds.json"),
           "--model", str(tmp / "model.json"), "--steps", str(args.steps + 2),
           "--eval-interval", "1000000", "--eval-batches", "1", "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    if proc.returncode != 0:
        sys.exit(f"bench_gpu: {' '.join(cmd)} failed: {proc.stderr.strip()}")
    logs = sorted((tmp / "log").glob("*.jsonl"))
    rows = [json.loads(line) for line in logs[0].read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "tokens_per_second" in r][2:]
    if not rows:
        sys.exit(f"bench_gpu: no step metrics in {logs[0]}")
    return {"tokens_per_s": statistics.median(r["tokens_per_second"] for r in rows),
            "flops_per_s": statistics.median(r["achieved_flops_per_second"] for r in rows),
            "step_ms": 1e3 * statistics.median(r["step_seconds"] for r in rows),
            "loss": rows[-1]["loss"]}


def torch_train_run(args, precision, attention):
    """PyTorch's whole training step on cuda:0, eager: forward (bf16 autocast
    over fp32 weights, PyTorch's mixed precision), loss read back, backward,
    clipping to 1.0, fused AdamW; `attention` "unfused" is torch_gpt's (the T x T
    probabilities, as dstrain's unfused kernel), "sdpa" PyTorch's
    scaled_dot_product_attention (its flash kernel, what nanoGPT uses). None
    without a CUDA PyTorch."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if not torch.cuda.is_available() or args.device != "cuda":
        return None
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import torch_gpt

    spec = dict(GPT2, type="gpt", n_layer=args.layers, n_ctx=args.ctx, vocab_size=args.vocab,
                seed=1)
    cfg = torch_gpt.GPTConfig.from_spec(spec)
    model = torch_gpt.gpt2_init_(torch_gpt.GPT(cfg)).cuda()
    if attention == "sdpa":
        def sdpa_forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        for block in model.modules():
            if isinstance(block, torch_gpt.CausalSelfAttention):
                block.forward = sdpa_forward.__get__(block)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (args.batch, args.ctx), generator=gen).cuda()
    y = torch.randint(0, cfg.vocab_size, (args.batch, args.ctx), generator=gen).cuda()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            _, loss = model(x, y)
        value = loss.item()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        return value

    step_s, loss = timed_steps(step, args.steps)
    return {"torch": torch.__version__, "step_ms": step_s * 1e3,
            "tokens_per_s": args.batch * args.ctx / step_s, "loss": loss}


def device_peak_tflops(args, precision):
    """--peak-tflops, else the dense peak of a device known by name (0: unknown)."""
    if args.peak_tflops:
        return args.peak_tflops
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0.0
    for key, (bf16, fp32) in {"H100": (989.0, 67.0), "H200": (989.0, 67.0),
                              "A100": (312.0, 19.5)}.items():
        if key in name:
            return bf16 if precision != "fp32" else fp32
    return 0.0


def engine_main(args):
    import tempfile
    print(f"GPT-2 shape: {args.layers} layers x d_model {GPT2['d_model']}, context {args.ctx}, "
          f"micro-batch {args.batch}; the whole training step (AdamW, clipping, ZeRO {args.zero}"
          f"{', ZeRO-' + ('Infinity' if args.offload == 'infinity' else 'Offload') if args.offload else ''}) on "
          f"{'the guarded stand-in' if args.device == 'standin' else 'cuda:0'}, median of "
          f"{args.repeats} interleaved runs (min-max); MFU = the model's FLOPs (dstrain's count, "
          "the same for both) over the device's dense peak")
    choices = args.attention.split(",")
    for precision in args.precisions.split(","):
        peak = device_peak_tflops(args, precision)
        runs = {choice: [] for choice in choices}
        peers = {"unfused": [], "sdpa": []}
        for _ in range(args.repeats):
            for choice in choices:
                with tempfile.TemporaryDirectory() as tmp:
                    runs[choice].append(engine_run(args, precision, pathlib.Path(tmp), choice))
            if not args.offload:
                for attention, out in peers.items():
                    peer = torch_train_run(args, precision, attention)
                    if peer:
                        out.append(peer)
        first = runs[choices[0]]
        flops_per_token = statistics.median(r["flops_per_s"] / r["tokens_per_s"] for r in first)

        def mfu(tokens_per_s):
            return 100 * tokens_per_s * flops_per_token / (peak * 1e12) if peak else 0.0

        for choice in choices:
            tps = median_spread([r["tokens_per_s"] for r in runs[choice]])
            print(f"{precision}: dstrain train (DSTRAIN_CUDA_ATTENTION={choice}) {tps[0]:.0f} tok/s "
                  f"({tps[1]:.0f}-{tps[2]:.0f}), step "
                  f"{statistics.median(r['step_ms'] for r in runs[choice]):.1f} ms, "
                  f"MFU {mfu(tps[0]):.1f}% of {peak:.0f} TFLOP/s", flush=True)
        best = max(statistics.median(r["tokens_per_s"] for r in runs[c]) for c in choices)
        for attention, out in peers.items():
            if out:
                t = median_spread([r["tokens_per_s"] for r in out])
                print(f"{precision}: torch {out[0]['torch']} eager ({attention} attention) "
                      f"{t[0]:.0f} tok/s ({t[1]:.0f}-{t[2]:.0f}), MFU {mfu(t[0]):.1f}%; "
                      f"dstrain's best / torch {best / t[0]:.2f}x", flush=True)
        print(json.dumps({"precision": precision, "peak_tflops": peak, "engine": runs,
                          "torch": peers}), flush=True)


def median_spread(values):
    return statistics.median(values), min(values), max(values)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.environ.get("DSTRAIN_BUILD_DIR", "build"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--precisions", default="bf16,fp32")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--layers", type=int, default=GPT2["n_layer"])
    ap.add_argument("--ctx", type=int, default=GPT2["n_ctx"])
    ap.add_argument("--device", choices=["cuda", "cpu", "standin"], default="cuda")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--engine", action="store_true",
                    help="the whole training step through `dstrain train` on the device")
    ap.add_argument("--zero", type=int, default=1, help="ZeRO stage of --engine")
    ap.add_argument("--offload", choices=["optimizer", "infinity"], default=None,
                    help="--engine with the optimizer on the host (ZeRO-Offload), or the "
                         "parameters too (ZeRO-Infinity, ZeRO 3)")
    ap.add_argument("--attention", default="auto",
                    help="--engine: DSTRAIN_CUDA_ATTENTION values to run, interleaved "
                         "(e.g. auto,fused: the GEMM attention against the fused kernel)")
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="--engine: the device's dense peak for MFU (default: known by name)")
    ap.add_argument("--vocab", type=int, default=GPT2["vocab_size"],
                    help="vocabulary of --engine (smaller for a quick check on the stand-in)")
    args = ap.parse_args()
    if args.offload == "infinity" and args.zero != 3:
        sys.exit("bench_gpu: --offload infinity offloads ZeRO 3's parameters: add --zero 3")
    if args.engine:
        return engine_main(args)
    if args.device == "standin":
        sys.exit("bench_gpu: --device standin needs --engine")

    print(f"GPT-2 shape: {args.layers} layers x d_model {GPT2['d_model']}, {GPT2['n_head']} heads, "
          f"context {args.ctx}, vocabulary {GPT2['vocab_size']}, micro-batch {args.batch}; "
          f"forward + backward, median of {args.repeats} (min-max)")
    for precision in args.precisions.split(","):
        ours, theirs = [], []
        for _ in range(args.repeats):  # interleaved
            ours.append(dstrain_run(args, precision))
            peer = torch_run(args, precision, ours[-1]["tflops"] * 1e12 * ours[-1]["step_ms"] / 1e3,
                             ours[-1]["peak_tflops"])
            if peer:
                theirs.append(peer)
        first = ours[0]
        tps = median_spread([r["tokens_per_s"] for r in ours])
        mfu = median_spread([r["mfu"] for r in ours])
        line = (f"{precision}: dstrain {tps[0]:.0f} tok/s ({tps[1]:.0f}-{tps[2]:.0f}), "
                f"{statistics.median(r['tflops'] for r in ours):.1f} TFLOP/s, "
                f"MFU {100 * mfu[0]:.1f}% of {first['peak_tflops']:.0f} ({first['device']})")
        if theirs:
            ttps = median_spread([r["tokens_per_s"] for r in theirs])
            line += (f"; torch {theirs[0]['torch']} {ttps[0]:.0f} tok/s ({ttps[1]:.0f}-{ttps[2]:.0f}),"
                     f" MFU {100 * statistics.median(r['mfu'] for r in theirs):.1f}%;"
                     f" dstrain / torch {tps[0] / ttps[0]:.2f}x")
        print(line, flush=True)
        print(json.dumps({"precision": precision, "dstrain": ours, "torch": theirs}), flush=True)


if __name__ == "__main__":
    main()
