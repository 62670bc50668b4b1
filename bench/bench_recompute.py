#!/usr/bin/python3
"""Activation recomputation benchmark (not a test; DESIGN.md §7).

bench_gpt.py's GPT (d_model 384, 6 heads, context 256), micro-batch 8, one
rank x 2 threads, fp32, at 6 and 24 layers, under each recomputation mode:

  none        every layer's activations kept (the plain run)
  full        an "activation_checkpointing" section: every layer keeps its
              input, the rest is recomputed in its backward (interval 1)
  interval N  pipeline.activation_checkpoint_interval N: groups of N layers
              keep their input, the group's forward is recomputed together
  selective   activation_checkpointing.recompute_granularity "selective":
              everything kept but the attention probabilities [B, H, T, T]

Prints the activation peak (metrics: memory.activations.peak_bytes) and the
median tokens/s over --repeats interleaved runs (min..max beside it), and
each mode's ratio to the plain run. With one micro-batch in flight a group
of N > 1 layers holds N layers' work at once, so intervals > 1 pay off only
when many micro-batches are in flight (a pipeline's first stage).

Usage: python3 bench/bench_recompute.py [--build-dir build] [--layers 6,24]
                                        [--repeats 3] [--steps 2] [--threads 2]
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
import bench_dp  # noqa: E402  (last_json)
import bench_gpt  # noqa: E402  (MODEL, ADAMW, MICRO_BATCH, thread_env)

MODES = ["none", "full", "interval 2", "selective"]


def config(mode, threads):
    c = bench_gpt.ds_config(threads)
    if mode == "full":
        c["activation_checkpointing"] = {"partition_activations": False}
    elif mode.startswith("interval"):
        c["activation_checkpointing"] = {}
        c["pipeline"] = {"activation_checkpoint_interval": int(mode.split()[1])}
    elif mode == "selective":
        c["activation_checkpointing"] = {"recompute_granularity": "selective"}
    return c


def run(build, tmp, layers, mode, args):
    model, cfg = tmp / f"model{layers}.json", tmp / f"{layers}_{mode.replace(' ', '')}.json"
    model.write_text(json.dumps(dict(bench_gpt.MODEL, n_layer=layers)))
    cfg.write_text(json.dumps(config(mode, args.threads)))
    out = subprocess.run([str(build / "bench" / "bench_gpt_dstrain"), "--model", str(model),
                          "--config", str(cfg), "--warmup", "1", "--steps", str(args.steps)],
                         env=bench_gpt.thread_env(args.threads), capture_output=True, text=True,
                         check=True).stdout
    r = bench_dp.last_json(out)
    return r["tokens_per_s"], r["metrics"]["memory"]["activations"]["peak_bytes"] / 2**20


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--layers", default="6,24")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    print(f"GPT d_model {bench_gpt.MODEL['d_model']}, context {bench_gpt.MODEL['n_ctx']}, "
          f"micro-batch {bench_gpt.MICRO_BATCH}, 1 rank x {args.threads} threads, fp32; "
          f"median of {args.repeats} interleaved runs")
    print(f"{'layers':>6} {'mode':>11} {'act. peak MiB':>13} {'tokens/s':>9} {'(min..max)':>15} "
          f"{'memory':>7} {'speed':>6}")
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        for layers in [int(x) for x in args.layers.split(",")]:
            rates = {m: [] for m in MODES}
            peak = {}
            for _ in range(args.repeats):  # interleaved: each mode once per round
                for mode in MODES:
                    rate, peak[mode] = run(build, tmp, layers, mode, args)
                    rates[mode].append(rate)
            base_rate, base_peak = statistics.median(rates["none"]), peak["none"]
            for mode in MODES:
                med = statistics.median(rates[mode])
                spread = f"({min(rates[mode]):.0f}..{max(rates[mode]):.0f})"
                print(f"{layers:>6} {mode:>11} {peak[mode]:>13.1f} {med:>9.0f} {spread:>15} "
                      f"{peak[mode] / base_peak:>6.2f}x {med / base_rate:>5.2f}x", flush=True)


if __name__ == "__main__":
    main()
