#!/usr/bin/python3
"""gradient_compression against the plain reduction on the default job (not a
test; DESIGN.md §7): `dstrain train` under `dstrain launch --nproc-per-node 2`
(the built-in GPT: 4 layers, d_model 128, context 64, 0.8M parameters; global
batch 64, AdamW, warm-up + cosine; the default corpus), ZeRO --stage, for
--steps steps, once per setting. With AdamW (lr 3e-3): none, top-k 1% (raw
and Huffman-coded indices) and 10%, 1-bit, 2-bit, top-k 1% after a dense
warm-up of 10% of the steps (warmup_steps), OneBitAdam (DeepSpeed's 1-bit
Adam, freeze_step 10% of the steps) and bf16 reduction
(compress_communication). With SGD (lr 0.3, momentum 0.9, no clipping): none,
top-k 1% as it is, and Deep Gradient Compression's momentum correction with
momentum factor masking (top-k 1%, with Huffman-coded indices, and 1-bit).

Reported per setting: the final training and validation loss (rank 0's
`final:` line) and the validation loss's change against the uncompressed
run; the gradient bytes per step as the metrics count the collectives that
carry them (an all-reduce or reduce of S bytes counts S; an all-gather of 2
payloads counts both), and their fraction of the uncompressed run's; and the
encoded payload / fp32 bucket bytes (dstrain_gradient_compression_bytes_total).
One run per setting: losses and bytes are deterministic for a setting and
thread count; only the wall time is noisy (printed, not compared).

Usage: python3 bench/bench_compression.py [--build-dir build] [--steps 300] [--stage 0]
                                          [--settings "topk 1%,SGD DGC topk 1%"]
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

SGD = {"optimizer": {"type": "SGD", "params": {"lr": 0.3, "momentum": 0.9}},
       "gradient_clipping": 0.0}


def settings(steps):
    """(name, config changes, the uncompressed row it is compared with)."""
    warm = max(1, steps // 10)
    topk = {"algorithm": "topk", "topk_ratio": 0.01}
    dgc = {"momentum_correction": True}
    return [
        ("none", {}, "none"),
        ("topk 1%", {"gradient_compression": topk}, "none"),
        ("topk 10%", {"gradient_compression": {"algorithm": "topk", "topk_ratio": 0.1}}, "none"),
        ("topk 1% + huffman", {"gradient_compression": {**topk, "huffman_coding": True}}, "none"),
        ("1bit", {"gradient_compression": {"algorithm": "1bit"}}, "none"),
        ("2bit", {"gradient_compression": {"algorithm": "2bit"}}, "none"),
        ("topk 1% + warm-up", {"gradient_compression": {**topk, "warmup_steps": warm}}, "none"),
        ("OneBitAdam", {"optimizer": {"type": "OneBitAdam", "params": {
            "lr": 3e-3, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.1,
            "freeze_step": warm}}}, "none"),
        ("bf16 reduction", {"compress_communication": True}, "none"),
        ("update 1bit", {"gradient_compression": {"algorithm": "1bit", "target": "update"}},
         "none"),
        ("update 1bit chunk 256", {"gradient_compression": {
            "algorithm": "1bit", "target": "update", "chunk_size": 256}}, "none"),
        ("update 1bit chunk 64", {"gradient_compression": {
            "algorithm": "1bit", "target": "update", "chunk_size": 64}}, "none"),
        ("update topk 1%", {"gradient_compression": {**topk, "target": "update"}}, "none"),
        ("update topk 1% + huffman", {"gradient_compression": {
            **topk, "target": "update", "huffman_coding": True}}, "none"),
        ("SGD momentum", dict(SGD), "SGD momentum"),
        ("SGD topk 1%", {**SGD, "gradient_compression": topk}, "SGD momentum"),
        ("SGD DGC topk 1%", {**SGD, "gradient_compression": {**topk, **dgc}}, "SGD momentum"),
        ("SGD DGC topk 1% + huffman",
         {**SGD, "gradient_compression": {**topk, **dgc, "huffman_coding": True}},
         "SGD momentum"),
        ("SGD DGC 1bit", {**SGD, "gradient_compression": {"algorithm": "1bit", **dgc}},
         "SGD momentum"),
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
    log_dir = tmp / re.sub(r"[^a-z0-9]+", "_", name.lower())
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
    p.add_argument("--settings", default="",
                   help="comma-separated setting names to run (default: all; 'none' always runs)")
    args = p.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        wanted = {w.strip() for w in args.settings.split(",") if w.strip()}
        every = settings(args.steps)
        bases = {b for n, _, b in every if not wanted or n in wanted}
        chosen = [(n, e, b) for n, e, b in every if not wanted or n in wanted or n in bases]
        rows = []
        for name, extra, base in chosen:
            rows.append(run(build, pathlib.Path(tmp), name, extra, args))
            rows[-1]["base"] = base
    params = rows[0]["param_gather_bytes"]  # uncompressed: every all-gather is parameters'
    for r in rows:
        r["bytes_per_step"] = (r["comm_bytes"] - params) / args.steps
    by_name = {r["name"]: r for r in rows}
    print(f"default job, 2 ranks x 1 thread, ZeRO {args.stage}, {args.steps} steps "
          f"(each row against its uncompressed baseline: 'none' = AdamW, or 'SGD momentum')")
    print(f"{'setting':<26} {'loss':>7} {'val':>7} {'d val':>7} {'grad bytes/step':>16} "
          f"{'vs base':>8} {'payload/fp32':>13} {'wall s':>7}")
    for r in rows:
        base = by_name[r["base"]]
        ratio = r["payload_ratio"]
        print(f"{r['name']:<26} {r['loss']:7.4f} {r['val']:7.4f} "
              f"{(r['val'] - base['val']) / base['val']:+7.2%} {r['bytes_per_step']:16,.0f} "
              f"{r['bytes_per_step'] / base['bytes_per_step']:8.3f} "
              f"{'' if ratio is None else f'{ratio:13.4f}':>13} {r['wall_seconds']:7.1f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    sys.exit(main())
