#!/usr/bin/python3
"""Pipeline benchmarks (not tests; DESIGN.md §7), in one run:

1. Measured bubble fraction per schedule beside the theory: p stages (one
   rank x 1 thread each) x m micro-batches per step, bench_gpt.py's GPT with
   a smaller micro-batch so that a step of 16 micro-batches stays short. Two
   measures, averaged over the stages: the idle fraction 1 - (forward +
   backward seconds) / step seconds (everything a stage does not compute:
   waits, transfers, and the optimizer step, about 1% here), and the time it
   waits in receives (`pipe_bubble`) over the step (it misses the wait for the
   last stage inside the step's final all-reduce). Theory: GPipe and 1F1B
   (p-1)/(m+p-1), interleaved 1F1B (p-1)/(v*m+p-1), ZB-H1 (p-1)/(3m+p-1)
   (the zero-bubble paper's, when a forward, an input-gradient half and a
   weight-gradient half take equal time).
2. Throughput on 2 cores, same GPT and global batch (m micro-batches):
   pp = 2 (1F1B, ZB-H1) vs dp = 2 (ZeRO-0) vs one rank with 2 threads.
3. Saved activations per stage from `dstrain estimate` (the first stage holds
   p micro-batches under 1F1B, the last one).

p = 4 on this 2-core machine oversubscribes the cores (4 ranks, 2 cores): its
timings say little; pass --stages 2,4 to include it anyway.

Usage: python3 bench/bench_pipeline.py [--build-dir build] [--steps 3] [--warmup 1] [--repeats 3]
                                       [--stages 2] [--micro-batches 4,8,16]
                                       [--schedules gpipe,1f1b,interleaved,zb-h1]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import bench_dp  # noqa: E402  (run_ranks, last_json)
import bench_gpt  # noqa: E402  (MODEL, ADAMW)

MICRO = 2  # samples per micro-batch (x 256 tokens)
SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)]


def bubble_theory(schedule, p, m, v):
    if schedule == "zb-h1":
        return (p - 1) / (3 * m + p - 1)
    return (p - 1) / (v * m + p - 1)


def zero_bubble_theory(ranks, p, m):
    """ZB-H1's bubble with the measured mean durations of a forward (F), an
    input-gradient half (B) and a weight-gradient half (W), averaged over the
    stages: (p-1)(F+B-W) / (m(F+B+W) + (p-1)(F+B-W)) (the zero-bubble paper's;
    equal to the unit-time formula when F = B = W)."""
    def mean(op):
        return statistics.mean(e["end"] - e["start"] for r in ranks
                               for e in r["metrics"]["pipeline"]["timeline"] if e["op"] == op)
    f, b, w = mean("forward"), mean("backward_input"), mean("backward_weight")
    bubble = (p - 1) * max(f + b - w, 0.0)
    return bubble / (m * (f + b + w) + bubble), (f, b, w)


def config(m, pp=1, dp=1, threads=1, schedule="1f1b", virtual=1):
    c = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": m // dp,
         "optimizer": {"type": "AdamW", "params": bench_gpt.ADAMW},
         "zero_optimization": {"stage": 0, "overlap_comm": True},
         "dstrain": {"num_threads": threads}}
    if pp > 1:
        c["pipeline"] = {"stages": pp, "schedule": schedule, "virtual_stages": virtual,
                         "partition_method": "cost"}
    return c


def run(build, tmp, name, cfg, world, args, threads=1):
    path, model = tmp / f"{name}.json", tmp / "model.json"
    path.write_text(json.dumps(cfg))
    model.write_text(json.dumps(bench_gpt.MODEL))
    cmd = [str(build / "bench" / "bench_gpt_dstrain"), "--model", str(model), "--config",
           str(path), "--warmup", str(args.warmup), "--steps", str(args.steps)]
    if world == 1:
        env = bench_gpt.thread_env(threads)
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        return [bench_dp.last_json(out)]
    return [bench_dp.last_json(o) for o in bench_dp.run_ranks(cmd, world=world)]


def bubble_table(build, tmp, args):
    print("== bubble fraction: measured (mean over stages) vs theory ==")
    print(f"{'p':>2} {'schedule':>15} {'m':>3} {'idle':>6} {'recv wait':>9} {'theory':>7} "
          f"{'step s':>7}")
    for p in [int(x) for x in args.stages.split(",")]:
        for schedule, v in SCHEDULES:
            if schedule not in args.schedules.split(","):
                continue
            for m in [int(x) for x in args.micro_batches.split(",")]:
                if schedule == "interleaved" and m % p:
                    continue
                ranks = run(build, tmp, f"b{p}{schedule}{m}",
                            config(m, pp=p, schedule=schedule, virtual=v), p, args)
                idle, waits = [], []
                for r in ranks:
                    m_ = r["metrics"]
                    t = m_["time_seconds"]["last_step"]
                    idle.append(1 - (t["forward"] + t["backward"]) / m_["step_seconds"])
                    waits.append(m_["pipeline"]["last_step"]["bubble"] / m_["step_seconds"])
                theory = bubble_theory(schedule, p, m, v)
                step = max(r["mean_step_seconds"] for r in ranks)
                note = "  (4 ranks on 2 cores)" if p > 2 else ""
                if schedule == "zb-h1":
                    measured, (f, b, w) = zero_bubble_theory(ranks, p, m)
                    note += (f"  with measured F {f * 1e3:.0f} ms, B {b * 1e3:.0f} ms, "
                             f"W {w * 1e3:.0f} ms: {measured:.3f}")
                print(f"{p:>2} {schedule + (f' v={v}' if v > 1 else ''):>15} {m:>3} "
                      f"{statistics.mean(idle):>6.3f} {statistics.mean(waits):>9.3f} "
                      f"{theory:>7.3f} {step:>7.3f}{note}", flush=True)


def throughput(build, tmp, args):
    m = 8
    tokens = m * MICRO * bench_gpt.MODEL["n_ctx"]
    print(f"\n== throughput, {m} micro-batches of {MICRO} x {bench_gpt.MODEL['n_ctx']} tokens "
          f"per step, 2 cores, median of {args.repeats} interleaved runs (min..max) ==")
    rows = [("pp=2 1F1B, 2 ranks x 1 thread", config(m, pp=2), 2, 1),
            ("pp=2 ZB-H1, 2 ranks x 1 thread", config(m, pp=2, schedule="zb-h1"), 2, 1),
            ("dp=2 ZeRO-0, 2 ranks x 1 thread", config(m, dp=2), 2, 1),
            ("1 rank x 2 threads", config(m, threads=2), 1, 2)]
    rates = {name: [] for name, *_ in rows}
    for _ in range(args.repeats):  # each configuration once per round
        for name, cfg, world, threads in rows:
            ranks = run(build, tmp, "".join(ch for ch in name if ch.isalnum()), cfg, world, args,
                        threads)
            rates[name].append(tokens / max(r["mean_step_seconds"] for r in ranks))
    for name, *_ in rows:
        r = rates[name]
        print(f"{name:<34} {statistics.median(r):>9.0f} tokens/s ({min(r):.0f}..{max(r):.0f})",
              flush=True)


def activation_table(build, tmp):
    print("\n== saved activations per stage (dstrain estimate), 1F1B, m = 8 ==")
    path, model = tmp / "est.json", tmp / "model.json"
    model.write_text(json.dumps(bench_gpt.MODEL))
    for p in (2, 4):
        cfg = config(8, pp=p)
        cfg["train_micro_batch_size_per_gpu"] = 8
        path.write_text(json.dumps(cfg))
        out = subprocess.run([str(build / "dstrain"), "estimate", "--config", str(path),
                              "--model", str(model), "--world-size", str(p), "--json"],
                             capture_output=True, text=True, check=True).stdout
        for r in json.loads(out)["pipeline"]["ranks"]:
            print(f"p={p} stage {r['rank']}: {r['micro_batches_in_flight']} micro-batches in "
                  f"flight x {r['saved_activation_bytes_per_micro_batch'] / 2**20:.1f} MiB = "
                  f"{r['saved_activation_bytes'] / 2**20:.1f} MiB")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help="throughput: interleaved rounds")
    p.add_argument("--stages", default="2")
    p.add_argument("--micro-batches", default="4,8,16")
    p.add_argument("--schedules", default=",".join(s for s, _ in SCHEDULES))
    p.add_argument("--skip", default="", help="comma-separated: bubble, throughput, activations")
    args = p.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    skip = set(args.skip.split(","))
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        if "bubble" not in skip:
            bubble_table(build, tmp, args)
        if "throughput" not in skip:
            throughput(build, tmp, args)
        if "activations" not in skip:
            activation_table(build, tmp)


if __name__ == "__main__":
    main()
