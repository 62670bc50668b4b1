#!/usr/bin/python3
"""gradient_compression against the plain reduction on the default job (not a
test; DESIGN.md §7): `dstrain train` under `dstrain launch --nproc-per-node 2`
(the built-in GPT: 4 layers, d_model 128, context 64, 0.8M parameters; global
batch 64, AdamW, warm-up + cosine; the default corpus), ZeRO --stage, for
--steps steps, once per setting: none, top-k 1% (raw and Huffman-coded
indices) and 10%, 1-bit, 2-bit, and bf16 reduction (compress_communication) for
comparison.

Reported per setting: the final training and validation loss (rank 0's
`final:` line) and the validation loss's change against the uncompressed
run; the gradient bytes per step as the metrics count the collectives that
carry them (an all-reduce or reduce of S bytes counts S; an all-gather of 2
payloads counts both), and their fraction of the uncompressed run's; and the
encoded payload / fp32 bucket bytes (dstrain_gradient_compression_bytes_total).
One run per setting: losses and bytes are deterministic for a setting and
thread count; only the wall time is noisy (printed, not compared).

Usage: python3 bench/bench_compression.py [--build-dir build] [--steps 300] [--stage 0]
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent

SETTINGS = [
    ("none", {}),
    ("topk 1%", {"gradient_compression": {"algorithm": "topk", "topk_ratio": 0.01}}),
    ("topk 10%", {"gradient_compression": {"algorithm": "topk", "topk_ratio": 0.1}}),
    ("topk 1% + huffman", {"gradient_compression": {"algorithm": "topk", "topk_ratio": 0.01,
                                                    "huffman_coding": True}}),
    ("1bit", {"gradient_compression": {"algorithm": "1bit"}}),
    ("2bit", {"gradient_compression": {"algorithm": "2bit"}}),
    ("bf16 reduction", {"compress_communication": True}),
]
# The collectives that may carry gradients: ZeRO 0/1's all-reduce, reduce
# and compressed all-gathers, ZeRO 2/3's reduce to the owners and sparse
# reduce-scatter sends. At stage >= 1 the parameters' all-gathers are the
# same in every setting: the uncompressed run's all-gather bytes (all
# parameters) are taken off.
GRADIENT_OPS = ("allreduce", "reduce", "allgather", "send")


def config(steps, stage, extra, log_dir):
    c = {
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": 32,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.99],
                                                  "eps": 1e-8, "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupCosineLR",
                      "params": {"total_num_steps": steps,
                                 "warmup_num_steps": 30 if steps >= 300 else steps // 10,
                                 "warmup_type": "linear"}},
        "gradient_clipping": 1.0,
        "steps_per_print": steps,
        "zero_optimization": {"stage": stage},
        "dstrain": {"num_threads": 1,
                    "monitor": {"log": {"enabled": True, "path": str(log_dir),
                                        "format": "jsonl"}}},
    }
    c.update(extra)
    return c


def last_sample(log_dir):
    files = sorted(pathlib.Path(log_dir).glob("*rank0*"))
    if not files:
        raise SystemExit(f"no rank 0 log in {log_dir}")
    return json.loads(files[0].read_text().strip().splitlines()[-1])


def run(build, tmp, name, extra, args):
    log_dir = tmp / re.sub(r"[^a-z0-9]+", "_", name)
    cfg = tmp / f"{log_dir.name}.json"
    cfg.write_text(json.dumps(config(args.steps, args.stage, extra, log_dir)))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    start = time.monotonic()
    out = subprocess.run([str(build / "dstrain"), "launch", "--nproc-per-node", "2", "--",
                          str(build / "dstrain"), "train", "--config", str(cfg), "--steps",
                          str(args.steps), "--quiet"],
                         capture_output=True, text=True, env=env, timeout=3600)
    wall = time.monotonic() - start
    if out.returncode != 0:
        raise SystemExit(f"{name}: {out.stderr}")
    final = re.search(r"final: step (\d+)\s+loss ([\d.]+)\s+val ([\d.]+)", out.stdout)
    if not final:
        raise SystemExit(f"{name}: no final line in\n{out.stdout}")
    s = last_sample(log_dir)
    grad_bytes = sum(s["comm"].get(op, {}).get("bytes", 0) for op in GRADIENT_OPS)
    gc = s["gradient_compression"]
    return {"name": name, "loss": float(final.group(2)), "val": float(final.group(3)),
            "comm_bytes": grad_bytes,
            "param_gather_bytes": s["comm"].get("allgather", {}).get("bytes", 0),
            "wall_seconds": wall,
            "payload_ratio": gc["payload_bytes_total"] / gc["dense_bytes_total"]
            if gc["dense_bytes_total"] else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--stage", type=int, default=0, choices=[0, 1, 2, 3])
    args = p.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(build, pathlib.Path(tmp), name, extra, args) for name, extra in SETTINGS]
    params = rows[0]["param_gather_bytes"]  # uncompressed: every all-gather is parameters'
    for r in rows:
        r["bytes_per_step"] = (r["comm_bytes"] - params) / args.steps
    base = rows[0]
    print(f"default job, 2 ranks x 1 thread, ZeRO {args.stage}, {args.steps} steps")
    print(f"{'setting':<20} {'loss':>7} {'val':>7} {'d val':>7} {'grad bytes/step':>16} "
          f"{'vs none':>8} {'payload/fp32':>13} {'wall s':>7}")
    for r in rows:
        ratio = r["payload_ratio"]
        print(f"{r['name']:<20} {r['loss']:7.4f} {r['val']:7.4f} "
              f"{(r['val'] - base['val']) / base['val']:+7.2%} {r['bytes_per_step']:16,.0f} "
              f"{r['bytes_per_step'] / base['bytes_per_step']:8.3f} "
              f"{'' if ratio is None else f'{ratio:13.4f}':>13} {r['wall_seconds']:7.1f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    sys.exit(main())
