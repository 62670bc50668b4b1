#!/usr/bin/python3
"""The largest GPT this machine trains without offload and with both NVMe
tiers (ZeRO-Infinity's optimizer state and parameters on the drive), by
`dstrain estimate` — and one real run at a size the resident engine cannot
hold (not a test; DESIGN.md §7).

  1. A ladder of GPT-2-style models (vocabulary 50304, context 64,
     micro-batch 1, bf16, AdamW, ZeRO 3 on one rank). For each: the peak a
     rank needs by `dstrain estimate` (model state + activations) resident
     and offloaded, and the swap files' size offloaded. The largest that
     fits --budget of the machine's memory (default 0.9 of MemTotal) and
     --disk of the swap directory's free space (default 0.9).
  2. The smallest ladder model whose resident peak exceeds the budget,
     trained for --steps steps offloaded: step time, peak RSS (getrusage of
     the child), swap bytes moved, the losses.

Usage: python3 bench/bench_largest_gpt.py [--build-dir build] [--dir DIR] [--steps 2]
                                          [--threads 2] [--no-run]
"""
import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import bench_gpt  # noqa: E402  (thread_env)

LADDER = [(24, 1024), (24, 1536), (24, 2048), (32, 2048), (32, 2560), (40, 3072), (48, 4096),
          (64, 4096), (64, 5120), (80, 6144)]
SUB_GROUP = 20_000_000  # 4 buffers x 3 tensors x 80 MB


def model(layers, width):
    return {"type": "gpt", "vocab_size": 50304, "n_ctx": 64, "n_layer": layers,
            "n_head": width // 128, "d_model": width, "seed": 1}


def config(threads, swap_dir=None):
    c = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
         "bf16": {"enabled": True},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
         "zero_optimization": {"stage": 3, "sub_group_size": SUB_GROUP},
         "dstrain": {"num_threads": threads}}
    if swap_dir:
        z = c["zero_optimization"]
        z["offload_optimizer"] = {"device": "nvme", "nvme_path": str(swap_dir),
                                  "buffer_count": 4, "pipeline_read": True,
                                  "pipeline_write": True}
        z["offload_param"] = {"device": "nvme", "nvme_path": str(swap_dir), "buffer_count": 3,
                              "buffer_size": 400_000_000, "max_in_cpu": 0}
        c["aio"] = {"block_size": 1048576, "queue_depth": 8}
    return c


def estimate(build, tmp, cfg, spec):
    c, m = tmp / "estimate_config.json", tmp / "estimate_model.json"
    c.write_text(json.dumps(cfg))
    m.write_text(json.dumps(spec))
    out = subprocess.run([str(build / "dstrain"), "estimate", "--config", str(c), "--model",
                          str(m), "--world-size", "1", "--json"], capture_output=True, text=True,
                         check=True).stdout
    report = json.loads(out)
    return report["num_parameters"], report["per_rank"]["total_bytes"]


def swap_bytes(n):
    """Both swap files: two slots of the fp32 master weights and Adam's two
    moments (12 bytes a parameter), two slots of the bf16 parameters."""
    return 2 * 12 * n + 2 * 2 * n


def gib(b):
    return f"{b / 2**30:.1f}"


def run(build, tmp, cfg, spec, steps, threads):
    c, m = tmp / "run_config.json", tmp / "run_model.json"
    c.write_text(json.dumps(cfg))
    m.write_text(json.dumps(spec))
    start = time.monotonic()
    proc = subprocess.run([str(build / "tests" / "dst_dp_tool"), "--model", str(m), "--config",
                           str(c), "--steps", str(steps), "--progress", "1"],
                          env=bench_gpt.thread_env(threads), capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"the offloaded run failed: {proc.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall, peak


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", default=str(REPO / "build"))
    parser.add_argument("--dir", default=None, help="swap directory (default: under /var/tmp)")
    parser.add_argument("--budget", type=float, default=0.9, help="fraction of MemTotal")
    parser.add_argument("--disk", type=float, default=0.9, help="fraction of the free space")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-run", action="store_true")
    args = parser.parse_args()
    build = pathlib.Path(args.build_dir)
    base = pathlib.Path(args.dir) if args.dir else pathlib.Path(
        tempfile.mkdtemp(prefix="dstrain_largest_", dir="/var/tmp"))
    swap = base / "swap"
    swap.mkdir(parents=True, exist_ok=True)
    with open("/proc/meminfo") as f:
        mem_total = int(next(line for line in f if line.startswith("MemTotal")).split()[1]) * 1024
    budget = args.budget * mem_total
    disk = args.disk * shutil.disk_usage(swap).free

    print(f"memory budget {gib(budget)} GiB ({args.budget} of {gib(mem_total)}), swap space "
          f"{gib(disk)} GiB ({args.disk} of the free space under {base})")
    print(f"{'layers':>6} {'d_model':>7} {'params':>8} {'resident GiB':>13} {'offloaded GiB':>14}"
          f" {'swap GiB':>9}  fits")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for layers, width in LADDER:
            spec = model(layers, width)
            n, resident = estimate(build, tmp, config(args.threads), spec)
            _, offloaded = estimate(build, tmp, config(args.threads, swap), spec)
            fits = ("resident" if resident <= budget else
                    "offloaded" if offloaded <= budget and swap_bytes(n) <= disk else "no")
            rows.append((layers, width, n, resident, offloaded, fits))
            print(f"{layers:>6} {width:>7} {n / 1e9:>7.2f}B {gib(resident):>13} "
                  f"{gib(offloaded):>14} {gib(swap_bytes(n)):>9}  {fits}")
        largest = {kind: max((r for r in rows if r[5] == kind or
                              (kind == "offloaded" and r[5] == "resident")),
                             key=lambda r: r[2], default=None)
                   for kind in ("resident", "offloaded")}
        for kind, r in largest.items():
            if r:
                print(f"largest {kind}: {r[2] / 1e9:.2f}B parameters ({r[0]} layers x {r[1]})")
        by_memory = max((r for r in rows if r[4] <= budget), key=lambda r: r[2], default=None)
        if by_memory:
            print(f"largest offloaded by memory alone (a larger drive): {by_memory[2] / 1e9:.2f}B "
                  f"parameters ({by_memory[0]} layers x {by_memory[1]})")
        if args.no_run:
            return
        target = next((r for r in rows if r[5] == "offloaded"), None)
        if target is None:
            print("no ladder model needs offload and fits the swap space: nothing to run")
            return
        layers, width, n = target[0], target[1], target[2]
        print(f"\n== a real run: {n / 1e9:.2f}B parameters ({layers} x {width}), both tiers on "
              f"NVMe, {args.steps} steps, {args.threads} threads ==")
        report, wall, peak = run(build, tmp, config(args.threads, swap), model(layers, width),
                                 args.steps, args.threads)
    shutil.rmtree(swap, ignore_errors=True)
    m = report["metrics"]
    o, p = m["offload"]["optimizer"], m["offload"]["param"]
    moved = o["read_bytes"] + o["write_bytes"] + p["read_bytes"] + p["write_bytes"]
    print(f"wall {wall:.0f} s for start-up + {args.steps} steps; last step "
          f"{m['time_seconds']['last_step']['total']:.1f} s; losses {report['losses']}")
    print(f"peak RSS {gib(peak)} GiB (resident estimate {gib(target[3])} GiB, budget "
          f"{gib(budget)}); swap moved {moved / 2**30:.1f} GiB; I/O wait "
          f"{o['io_wait_seconds'] + p['io_wait_seconds']:.1f} s")
    os.sync()


if __name__ == "__main__":
    main()
