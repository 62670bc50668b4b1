#!/usr/bin/python3
"""Soak tests: what a long-lived process or job holds must stay flat.

  scripts/soak.py cycles [--cycles 1000]
      one process: create an engine, train, (every tenth cycle) save a
      checkpoint, destroy; ZeRO 0-3 and fp32/bf16/fp16 in turn
      (tests/tools/dst_soak_cycles).
  scripts/soak.py train [--minutes 20] [--save-interval STEPS]
      a 2-rank `dstrain launch ... dstrain train` with a checkpoint every
      STEPS steps (about one a minute on a 2-core machine by default), both
      ranks' /proc sampled every few seconds.

Each prints the open file descriptors, threads and resident set at the start
and end of its measured part and the least-squares slope of each (per cycle,
or per minute), as JSON on the last line; it exits 1 when descriptors or
threads grow or the resident set grows faster than --max-rss-slope (bytes per
cycle / per minute). The first cycles and the first minute are warm-up
(one-time caches) and not measured.
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def slope(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def summarize(samples, x_key, warmup):
    measured = [s for s in samples if s[x_key] >= warmup]
    if len(measured) < 2:
        raise SystemExit(f"soak: too few samples after the warm-up ({len(samples)} in all)")
    xs = [s[x_key] for s in measured]
    out = {"samples": len(measured), "from": xs[0], "to": xs[-1]}
    for key in ("fds", "threads", "rss_bytes"):
        ys = [s[key] for s in measured]
        q = max(1, len(ys) // 4)
        out[key] = {"first": ys[0], "last": ys[-1], "max": max(ys), "slope": slope(xs, ys),
                    "early": sorted(ys[:q])[q // 2], "late": sorted(ys[-q:])[q // 2]}
    return out


def verdict(summary, max_rss_slope, unit):
    problems = []
    for key in ("fds", "threads"):
        # Medians of the first and last quarter: a sample taken while a
        # checkpoint file or a monitor request is open is not growth.
        if summary[key]["late"] > summary[key]["early"]:
            problems.append(f"{key} grew from {summary[key]['early']} to {summary[key]['late']} "
                            f"(medians of the first and last quarter)")
    if summary["rss_bytes"]["slope"] > max_rss_slope:
        problems.append(f"the resident set grows {summary['rss_bytes']['slope']:.0f} bytes per "
                        f"{unit} (bound {max_rss_slope:.0f})")
    return problems


def build_dir(args):
    return pathlib.Path(args.build or os.environ.get("DSTRAIN_BUILD_DIR") or ROOT / "build")


def run_cycles(args):
    tool = build_dir(args) / "tests" / "dst_soak_cycles"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as ckpt:
        started = time.monotonic()
        out = subprocess.run([str(tool), str(args.cycles), ckpt], capture_output=True, text=True,
                             env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"soak: {tool} failed:\n{out.stderr}")
    samples = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    summary = summarize(samples, "cycle", args.warmup)
    summary.update(kind="cycles", cycles=args.cycles, seconds=round(time.monotonic() - started, 1))
    return summary, verdict(summary, args.max_rss_slope, "cycle")


def proc_usage(pid):
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": int(status["Threads"]),
            "rss_bytes": int(status["VmRSS"].split()[0]) * 1024}


def rank_pids(launcher_pid):
    """The launcher's children (the ranks), from /proc/*/stat."""
    pids = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == launcher_pid:  # field 4: the parent's pid
            pids.append(int(stat.parent.name))
    return sorted(pids)


def run_train(args):
    dstrain = build_dir(args) / "dstrain"
    config = {
        "train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
        "zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "dstrain": {"monitor": {"enabled": True, "http": {"enabled": True, "port": 0}}},
    }
    with tempfile.TemporaryDirectory() as work:
        cfg = pathlib.Path(work) / "config.json"
        cfg.write_text(json.dumps(config))
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        launcher = subprocess.Popen(
            [str(dstrain), "launch", "--nproc-per-node", "2", "--", str(dstrain), "train",
             "--config", str(cfg), "--model", str(ROOT / "examples/configs/llama_tiny.json"),
             "--steps", "100000000", "--save", str(pathlib.Path(work) / "ckpt"),
             "--save-interval", str(args.save_interval), "--eval-interval", "200", "--quiet"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=True)
        samples = []
        started = time.monotonic()
        try:
            while time.monotonic() - started < args.minutes * 60:
                time.sleep(args.sample_seconds)
                if launcher.poll() is not None:
                    raise SystemExit(f"soak: the job ended early:\n{launcher.stderr.read()}")
                pids = rank_pids(launcher.pid)
                if len(pids) != 2:
                    continue
                minute = (time.monotonic() - started) / 60
                for rank, pid in enumerate(pids):
                    try:
                        samples.append(dict(proc_usage(pid), rank=rank, minute=minute))
                    except FileNotFoundError:
                        pass
            checkpoints = len(list((pathlib.Path(work) / "ckpt").glob("global_step*")))
        finally:
            os.killpg(launcher.pid, signal.SIGINT)
            try:
                launcher.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(launcher.pid, signal.SIGKILL)
    problems, summary = [], {"kind": "train", "minutes": args.minutes,
                             "save_interval": args.save_interval, "ranks": {}}
    for rank in (0, 1):
        s = summarize([x for x in samples if x["rank"] == rank], "minute", args.warmup_minutes)
        summary["ranks"][rank] = s
        problems += [f"rank {rank}: {p}" for p in verdict(s, args.max_rss_slope, "minute")]
    summary["checkpoints_kept"] = checkpoints
    return summary, problems


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", help="the CMake build directory (default: $DSTRAIN_BUILD_DIR "
                                        "or ./build)")
    sub = parser.add_subparsers(dest="kind", required=True)
    cycles = sub.add_parser("cycles")
    cycles.add_argument("--cycles", type=int, default=1000)
    cycles.add_argument("--warmup", type=int, default=20, help="cycles not measured")
    cycles.add_argument("--max-rss-slope", type=float, default=16 * 1024,
                        help="bytes per cycle")
    train = sub.add_parser("train")
    train.add_argument("--minutes", type=float, default=20)
    train.add_argument("--save-interval", type=int, default=2000, help="steps")
    train.add_argument("--sample-seconds", type=float, default=5)
    train.add_argument("--warmup-minutes", type=float, default=1)
    train.add_argument("--max-rss-slope", type=float, default=1 << 20,
                       help="bytes per minute")
    args = parser.parse_args()
    summary, problems = run_cycles(args) if args.kind == "cycles" else run_train(args)
    for p in problems:
        print(f"soak: {p}", file=sys.stderr)
    print(json.dumps(summary))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
