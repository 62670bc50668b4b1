#!/usr/bin/python3
"""The three dimensions side by side (not a test; DESIGN.md §7), in one run.

bench_gpt.py's GPT (d_model 384, 6 heads, 6 layers, context 256), 8
micro-batches of 2 x 256 tokens per step (the same global batch everywhere),
fp32, on this machine's 2 cores:

  1 rank x 2 threads   the whole step on one process
  dp = 2               2 ranks x 1 thread, ZeRO-0, 4 micro-batches each
  tp = 2               2 ranks x 1 thread, every layer split (heads, MLP, vocabulary)
  tp = 2 + SP          the same with sequence parallelism
  pp = 2               2 ranks x 1 thread, 1F1B, partition "cost"

Prints tokens/s (median of --repeats interleaved rounds, min..max), each
rank's model state (parameters + gradients + optimizer state) and activation
peak from its metrics, and for tp = 2 the tensor-parallel bytes all-reduced
per step beside Megatron's formula without sequence parallelism: per
micro-batch of N = B x T rows, 4 all-reduces of N x d per block (two in
forward after the row-parallel projections, two in backward after the
column-parallel input gradients), plus the vocab-parallel embedding's
(forward) and the LM head's input gradient (backward), 2 more of N x d, and
the cross-entropy's 2N — (4 L + 2) N d + 2N floats. With sequence
parallelism each of those all-reduces of N x d becomes a reduce-scatter plus
an all-gather (the same bytes on a ring), and backward gathers the
LayerNorms' outputs again for the column-parallel weight gradients (as
Megatron does): reduce-scatters (4 L + 2) N d, all-gathers (6 L + 3) N d.

Usage: python3 bench/bench_3d.py [--build-dir build] [--repeats 3] [--steps 3] [--warmup 1]
"""
import argparse
import pathlib
import statistics
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import bench_gpt  # noqa: E402  (MODEL, ADAMW)
import bench_pipeline  # noqa: E402  (run: one layout's ranks, their JSON lines)

MICRO, M = 2, 8  # samples per micro-batch, micro-batches per step


def config(dp=1, tp=1, pp=1, threads=1, sp=False):
    c = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": M // dp,
         "optimizer": {"type": "AdamW", "params": bench_gpt.ADAMW},
         "zero_optimization": {"stage": 0, "overlap_comm": True},
         "dstrain": {"num_threads": threads}}
    if tp > 1:
        c["tensor_parallel"] = {"tp_size": tp, "sequence_parallel": sp}
    if pp > 1:
        c["pipeline"] = {"stages": pp, "partition_method": "cost"}
    return c


LAYOUTS = [("1 rank x 2 threads", config(threads=2), 1, 2),
           ("dp=2, 2 ranks x 1 thread", config(dp=2), 2, 1),
           ("tp=2, 2 ranks x 1 thread", config(tp=2), 2, 1),
           ("tp=2 + SP, 2 x 1 thread", config(tp=2, sp=True), 2, 1),
           ("pp=2, 2 ranks x 1 thread", config(pp=2), 2, 1)]


def model_state_mib(r):
    mem = r["metrics"]["memory"]
    return sum(mem[k]["bytes"] for k in ("parameters", "gradients", "optimizer_state")) / 2**20


def tp_formula_bytes():
    m = bench_gpt.MODEL
    n = MICRO * m["n_ctx"]
    floats = (4 * m["n_layer"] + 2) * n * m["d_model"] + 2 * n
    return M * floats * 4


def sp_formula_bytes():
    """(reduce-scattered, all-gathered) N x d bytes per step under SP."""
    m = bench_gpt.MODEL
    nd = MICRO * m["n_ctx"] * m["d_model"]
    return M * (4 * m["n_layer"] + 2) * nd * 4, M * (6 * m["n_layer"] + 3) * nd * 4


def op_bytes(metrics, op, steps):
    return metrics["comm"]["by_group"]["tp"].get(op, {"bytes": 0})["bytes"] / steps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    args = p.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    tokens = M * MICRO * bench_gpt.MODEL["n_ctx"]
    rates = {name: [] for name, *_ in LAYOUTS}
    last = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        for _ in range(args.repeats):  # each layout once per round
            for name, cfg, world, threads in LAYOUTS:
                ranks = bench_pipeline.run(build, tmp, "".join(ch for ch in name if ch.isalnum()),
                                           cfg, world, args, threads)
                rates[name].append(tokens / max(r["mean_step_seconds"] for r in ranks))
                last[name] = ranks
    print(f"GPT {bench_gpt.MODEL['n_layer']}L x {bench_gpt.MODEL['d_model']}, {M} micro-batches "
          f"of {MICRO} x {bench_gpt.MODEL['n_ctx']} tokens per step, fp32, 2 cores; median of "
          f"{args.repeats} interleaved runs (min..max)")
    print(f"{'layout':<26} {'tokens/s':>9} {'(min..max)':>15} {'model state MiB/rank':>21} "
          f"{'activation peak MiB/rank':>25}")
    for name, *_ in LAYOUTS:
        r = rates[name]
        states = "/".join(f"{model_state_mib(x):.1f}" for x in last[name])
        peaks = "/".join(f"{x['metrics']['memory']['activations']['peak_bytes'] / 2**20:.1f}"
                         for x in last[name])
        print(f"{name:<26} {statistics.median(r):>9.0f} {f'({min(r):.0f}..{max(r):.0f})':>15} "
              f"{states:>21} {peaks:>25}", flush=True)
    tp = last["tp=2, 2 ranks x 1 thread"][0]["metrics"]
    steps = args.warmup + args.steps
    measured = tp["comm"]["by_group"]["tp"]["allreduce"]["bytes"] / steps
    formula = tp_formula_bytes()
    print(f"\ntp = 2: all-reduced {measured / 2**20:.2f} MiB per step per rank; formula "
          f"(4L + 2) N d + 2N floats x {M} micro-batches = {formula / 2**20:.2f} MiB "
          f"(ratio {measured / formula:.4f}; the rest: the gradient norm's sum over tp)")
    sp = last["tp=2 + SP, 2 x 1 thread"][0]["metrics"]
    scattered, gathered = (op_bytes(sp, op, steps) for op in ("reduce_scatter", "allgather"))
    rs_formula, ag_formula = sp_formula_bytes()
    cross_entropy = op_bytes(tp, "allgather", steps)  # its row maxima, as without SP
    print(f"tp = 2 + SP: reduce-scattered {scattered / 2**20:.2f} MiB per step per rank, formula "
          f"(4L + 2) N d = {rs_formula / 2**20:.2f} MiB (ratio {scattered / rs_formula:.4f}); "
          f"all-gathered {gathered / 2**20:.2f} MiB, formula (6L + 3) N d + the cross-entropy's "
          f"{cross_entropy / 2**20:.2f} = {(ag_formula + cross_entropy) / 2**20:.2f} MiB "
          f"(ratio {gathered / (ag_formula + cross_entropy):.4f}); all-reduced "
          f"{op_bytes(sp, 'allreduce', steps) / 2**20:.2f} MiB (the cross-entropy's sums, "
          f"the LayerNorms' gradients, the norm)")


if __name__ == "__main__":
    main()
