#!/usr/bin/python3
"""dstrain vs PyTorch GPT training throughput on the CPU, side by side in one
run (DESIGN.md section 7). Prints ratios; asserts nothing.

Model: GPT 6 layers, 6 heads, d_model 384, n_ctx 256, vocab 256, micro-batch 8,
AdamW, fp32. For each thread count: the SGEMM peak (bench/sgemm_peak), dstrain
tokens/s (bench/bench_gpt_dstrain, C ABI), PyTorch tokens/s (tests/python/
torch_gpt.py), each in its own process with OPENBLAS_NUM_THREADS and
OMP_NUM_THREADS pinned.

    python3 bench/bench_gpt.py --build-dir build [--quick] [--steps S] [--threads 1,2]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

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
MICRO_BATCH = 8
ADAMW = {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}


def ds_config(threads):
    return {
        "train_batch_size": MICRO_BATCH,
        "train_micro_batch_size_per_gpu": MICRO_BATCH,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": ADAMW},
        "dstrain": {"num_threads": threads},
    }


def train_flops_per_step(model=MODEL, batch=MICRO_BATCH):
    """Exact matmul FLOPs of one training step of the implementation: forward
    linears 2*N*C*(3C + C + 4C + 4C) per layer, attention QK^T and AV in full
    (unmasked) 2*B*H*T*T*hs*2 per layer, the tied LM head 2*N*C*V; backward
    is twice the forward."""
    c, t, v, h = model["d_model"], model["n_ctx"], model["vocab_size"], model["n_head"]
    hs = c // h
    n = batch * t
    per_layer = 2 * n * c * (3 * c + c + 4 * c + 4 * c) + 2 * batch * h * t * t * hs * 2
    forward = model["n_layer"] * per_layer + 2 * n * c * v
    return 3 * forward


def thread_env(threads):
    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    env["OMP_NUM_THREADS"] = str(threads)
    env["DSTRAIN_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    return env


def last_json_line(text, what):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{what}: no JSON result in its output:\n{text}")


def run(cmd, threads, what, timeout):
    t0 = time.time()
    proc = subprocess.run(
        cmd, env=thread_env(threads), capture_output=True, text=True, timeout=timeout
    )
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

    import torch_gpt

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    cfg = torch_gpt.GPTConfig.from_spec(MODEL)
    model = torch_gpt.gpt2_init_(torch_gpt.GPT(cfg))
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=ADAMW["lr"],
        betas=tuple(ADAMW["betas"]),
        eps=ADAMW["eps"],
        weight_decay=ADAMW["weight_decay"],
    )
    gen = torch.Generator().manual_seed(1)
    stream = torch.randint(0, cfg.vocab_size, (MICRO_BATCH * cfg.n_ctx + 1,), generator=gen)
    x = stream[:-1].view(MICRO_BATCH, cfg.n_ctx)
    y = stream[1:].view(MICRO_BATCH, cfg.n_ctx)

    def step():
        opt.zero_grad(set_to_none=True)
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
                "tokens_per_s": MICRO_BATCH * cfg.n_ctx * args.steps / total,
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
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps is None:
        args.steps = 2 if args.quick else 5
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2

    if args.torch_worker:
        args.threads = int(args.threads)
        torch_worker(args)
        return

    build = find_build_dir(args.build_dir)
    threads_list = [int(t) for t in args.threads.split(",") if t.strip()]
    flops = train_flops_per_step()
    tokens_per_step = MICRO_BATCH * MODEL["n_ctx"]
    print(
        f"GPT {MODEL['n_layer']}L x {MODEL['d_model']} ({MODEL['n_head']} heads), "
        f"n_ctx {MODEL['n_ctx']}, vocab {MODEL['vocab_size']}, micro-batch {MICRO_BATCH}, "
        f"AdamW fp32; {flops / 1e9:.1f} GFLOP per training step; "
        f"{args.warmup} warm-up + {args.steps} timed steps; build {build}",
        flush=True,
    )
    rows = []
    timeout = 1800
    with tempfile.TemporaryDirectory(prefix="dst_bench_") as tmp:
        model_path = pathlib.Path(tmp) / "model.json"
        model_path.write_text(json.dumps(MODEL))
        for n in threads_list:
            print(f"threads={n}", file=sys.stderr, flush=True)
            config_path = pathlib.Path(tmp) / f"ds_config_t{n}.json"
            config_path.write_text(json.dumps(ds_config(n)))
            sgemm_cmd = [build / "bench" / "sgemm_peak", "--threads", str(n), "--json"]
            if args.quick:
                sgemm_cmd.append("--quick")
            sgemm = last_json_line(run(sgemm_cmd, n, "sgemm_peak", timeout), "sgemm_peak")
            dst_cmd = [
                build / "bench" / "bench_gpt_dstrain",
                "--model", model_path, "--config", config_path,
                "--warmup", str(args.warmup), "--steps", str(args.steps),
            ]  # fmt: skip
            dst = last_json_line(run(dst_cmd, n, "dstrain", timeout), "bench_gpt_dstrain")
            torch_cmd = [
                sys.executable, __file__, "--torch-worker", "--threads", str(n),
                "--warmup", str(args.warmup), "--steps", str(args.steps),
            ]  # fmt: skip
            tor = last_json_line(run(torch_cmd, n, "pytorch", timeout), "torch worker")
            dst_gflops = flops * dst["tokens_per_s"] / tokens_per_step / 1e9
            torch_gflops = flops * tor["tokens_per_s"] / tokens_per_step / 1e9
            rows.append(
                dict(
                    threads=n,
                    dst=dst["tokens_per_s"],
                    torch=tor["tokens_per_s"],
                    ratio=dst["tokens_per_s"] / tor["tokens_per_s"],
                    dst_gflops=dst_gflops,
                    torch_gflops=torch_gflops,
                    peak=sgemm["peak_gflops"],
                    dst_loss=(dst["first_loss"], dst["last_loss"]),
                    torch_loss=(tor["first_loss"], tor["last_loss"]),
                )
            )

    print()
    head = (
        f"{'threads':>7} {'dstrain tok/s':>14} {'torch tok/s':>12} {'dst/torch':>10} "
        f"{'dst GFLOP/s':>12} {'SGEMM peak':>11} {'dst/peak':>9} {'torch/peak':>11}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['threads']:>7} {r['dst']:>14.1f} {r['torch']:>12.1f} {r['ratio']:>10.3f} "
            f"{r['dst_gflops']:>12.1f} {r['peak']:>11.1f} {r['dst_gflops'] / r['peak']:>9.3f} "
            f"{r['torch_gflops'] / r['peak']:>11.3f}"
        )
    print()
    for r in rows:
        print(
            f"threads {r['threads']}: loss first/last timed step  dstrain "
            f"{r['dst_loss'][0]:.4f}/{r['dst_loss'][1]:.4f}  torch "
            f"{r['torch_loss'][0]:.4f}/{r['torch_loss'][1]:.4f} (same model, different init)"
        )


if __name__ == "__main__":
    main()
