#!/usr/bin/python3
"""Mixed-precision memory and checkpoint benchmarks (not tests; DESIGN.md §7),
in one run:

1. Per-rank model-state memory for fp16 + AdamW at ZeRO stages 0-3 and dp 1,
   2, 4, measured by training one step of each layout (the engine's memory
   accounting), beside the ZeRO paper's Table 1 formulas (K = 12):
   stage 0: 16P; 1: 4P + 12P/N; 2: 2P + 14P/N; 3: 16P/N.
2. Checkpoint save and load throughput (MB/s, whole checkpoint, one rank, the
   GPT of bench_gpt.py with AdamW) beside the sequential write (with fsync)
   and read bandwidth of the same directory's disk, measured in the same run
   with a file of the same size. Reads of both come through the page cache
   alike (the file was just written); the save includes fsync like the
   baseline write.

Usage: python3 bench/bench_checkpoint.py [--build-dir build] [--dir /tmp] [--repeat 3]
"""
import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "python"))
import bench_gpt  # noqa: E402  (MODEL)
from test_data_parallel import run_ranks  # noqa: E402  (torchrun-style rank launcher)

MB = 1e6


def memory_table(build, tmp):
    print("Per-rank model-state memory, fp16 + AdamW, measured (MB) vs ZeRO Table 1 (K = 12)")
    print(f"{'stage':>5} {'dp':>3} {'params':>9} {'grads':>9} {'optim':>9} {'total':>9} "
          f"{'formula':>9} {'ratio':>7}")
    model = tmp / "model.json"
    spec = dict(bench_gpt.MODEL, n_ctx=16)  # memory does not depend on the context
    model.write_text(json.dumps(spec))
    tool = str(build / "tests" / "dst_dp_tool")
    for stage in range(4):
        for dp in (1, 2, 4):
            cfg = tmp / f"mem{stage}{dp}.json"
            cfg.write_text(json.dumps({
                "train_batch_size": dp, "train_micro_batch_size_per_gpu": 1,
                "optimizer": {"type": "AdamW", "params": bench_gpt.ADAMW},
                "fp16": {"enabled": True, "initial_scale_power": 8},
                "zero_optimization": {"stage": stage},
                "dstrain": {"num_threads": 1}}))
            r = run_ranks(tool, cfg, model, dp, steps=1)[0]
            mem = {k: v["bytes"] for k, v in r["metrics"]["memory"].items()}
            psi = r["metrics"]["num_parameters"]
            total = mem["parameters"] + mem["gradients"] + mem["optimizer_state"]
            formula = {0: 16 * psi, 1: 4 * psi + 12 * psi / dp, 2: 2 * psi + 14 * psi / dp,
                       3: 16 * psi / dp}[stage]
            print(f"{stage:>5} {dp:>3} {mem['parameters'] / MB:>9.2f} {mem['gradients'] / MB:>9.2f} "
                  f"{mem['optimizer_state'] / MB:>9.2f} {total / MB:>9.2f} {formula / MB:>9.2f} "
                  f"{total / formula:>7.4f}")
    print(f"(P = {psi} parameters; the measured bytes include padding to a multiple of dp)")


def disk_bandwidth(directory, size):
    """Sequential write (fsync included) and read of `size` bytes, MB/s."""
    path = directory / "disk_probe.bin"
    block = os.urandom(1 << 20)
    start = time.perf_counter()
    with open(path, "wb") as f:
        written = 0
        while written < size:
            f.write(block)
            written += len(block)
        f.flush()
        os.fsync(f.fileno())
    write = written / (time.perf_counter() - start)
    start = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(1 << 22):
            pass
    read = written / (time.perf_counter() - start)
    path.unlink()
    return write / MB, read / MB


def checkpoint_throughput(build, directory, repeat):
    os.environ["DSTRAIN_BUILD_DIR"] = str(build)
    sys.path.insert(0, str(REPO / "sdk-python" / "src"))
    import dstrain

    config = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
              "optimizer": {"type": "AdamW", "params": bench_gpt.ADAMW},
              "dstrain": {"num_threads": 1}}
    ckpt = directory / "ckpt"
    saves, loads = [], []
    with dstrain.Engine(config=config, model=bench_gpt.MODEL) as engine:
        for i in range(repeat):
            start = time.perf_counter()
            engine.save_checkpoint(ckpt, tag=f"t{i}")
            saves.append(time.perf_counter() - start)
        size = sum(p.stat().st_size for p in (ckpt / "t0").iterdir())
        for i in range(repeat):
            start = time.perf_counter()
            engine.load_checkpoint(ckpt, tag=f"t{i}")
            loads.append(time.perf_counter() - start)
    shutil.rmtree(ckpt)
    disk_write, disk_read = disk_bandwidth(directory, size)
    save = size / min(saves) / MB
    load = size / min(loads) / MB
    print(f"\nCheckpoint of {bench_gpt.MODEL['n_layer']}L/{bench_gpt.MODEL['d_model']} GPT + AdamW: "
          f"{size / MB:.1f} MB, best of {repeat}, in {directory}")
    print(f"  save {save:8.1f} MB/s   disk write (fsync) {disk_write:8.1f} MB/s   "
          f"ratio {save / disk_write:.2f}")
    print(f"  load {load:8.1f} MB/s   disk read          {disk_read:8.1f} MB/s   "
          f"ratio {load / disk_read:.2f}")
    print("  (load verifies every file's checksum and the model's tensors before copying)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--dir", default=None, help="directory for the checkpoint (its disk)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        memory_table(build, pathlib.Path(tmp))
        checkpoint_throughput(build, pathlib.Path(tmp), args.repeat)


if __name__ == "__main__":
    main()
