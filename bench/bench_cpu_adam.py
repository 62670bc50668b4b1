#!/usr/bin/python3
"""CPU-Adam vs torch.optim.AdamW, one thread each, in one run (not a test).

Runs build/bench/bench_cpu_adam (CPU-Adam's AVX-512 / AVX2 / scalar paths and
the previous compiler-vectorised update, with a STREAM-like triad for the
memory bandwidth) and torch's AdamW (foreach off and on) on the same number
of fp32 elements, --repeats interleaved rounds; prints the median
elements/s (min..max) and each as a multiple of torch's best.

Usage: python3 bench/bench_cpu_adam.py [--build-dir build] [--elements N] [--repeats 3]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import time

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent


def torch_rates(n):
    torch.set_num_threads(1)
    out = {}
    for foreach in (False, True):
        p = torch.nn.Parameter(torch.full((n,), 0.5))
        p.grad = torch.full((n,), 1e-3)
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, foreach=foreach)
        opt.step()
        best = min(timed(opt.step) for _ in range(8))
        out[f"torch AdamW (foreach={foreach})"] = n / best
    return out


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=str(REPO / "build"))
    # 64M elements: Adam's 1 GiB working set is well beyond this machine's 260 MiB L3.
    ap.add_argument("--elements", type=int, default=1 << 26)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    binary = pathlib.Path(args.build_dir) / "bench" / "bench_cpu_adam"
    rates, fractions, of_streams, triads, streams = {}, {}, {}, [], []
    for _ in range(args.repeats):  # interleaved: ours, then torch's
        ours = json.loads(subprocess.run(
            [str(binary), "--elements", str(args.elements), "--json"], check=True,
            capture_output=True, text=True, env={"OMP_NUM_THREADS": "1"}).stdout)
        triads.append(ours["triad_bytes_per_second"])
        streams.append(ours["adam_streams_bytes_per_second"])
        for row in ours["rows"]:
            rates.setdefault(row["name"], []).append(row["elements_per_second"])
            fractions.setdefault(row["name"], []).append(row["bandwidth_fraction"])
            of_streams.setdefault(row["name"], []).append(row["streams_fraction"])
        for name, rate in torch_rates(args.elements).items():
            rates.setdefault(name, []).append(rate)
    torch_best = max(statistics.median(v) for k, v in rates.items() if k.startswith("torch"))
    print(f"{args.elements} fp32 elements, 1 thread, median of {args.repeats} interleaved runs; "
          f"triad {statistics.median(triads) / 1e9:.1f} GB/s, Adam's 7 streams without its "
          f"arithmetic {statistics.median(streams) / 1e9:.1f} GB/s")
    print(f"{'update':<42} {'M elements/s':>13} {'(min..max)':>16} {'x torch':>8} {'of triad':>9} "
          f"{'of streams':>11}")
    for name, r in rates.items():
        med = statistics.median(r)
        pct = lambda d: f"{100 * statistics.median(d[name]):.0f}%" if name in d else "-"
        print(f"{name:<42} {med / 1e6:>13.1f} {f'({min(r) / 1e6:.0f}..{max(r) / 1e6:.0f})':>16} "
              f"{med / torch_best:>8.2f} {pct(fractions):>9} {pct(of_streams):>11}")


if __name__ == "__main__":
    main()
