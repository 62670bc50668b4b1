#!/usr/bin/python3
"""The optimizer's NVMe tier against the drive and against staying resident
(not a test; DESIGN.md §7), in one run.

  1. The drive: fio sequential write and read (1 MiB blocks, queue depth 8,
     O_DIRECT, io_uring) on --dir, beside `dstrain io-probe` at the same
     block size and depth (our I/O path on its own).
  2. Training: a GPT of 12.7M parameters (d_model 512, 4 layers, context 64,
     vocabulary 256; 146 MiB of fp32 master weights and Adam moments), bf16,
     ZeRO 1, one rank on --threads threads, micro-batch 4: resident, NVMe
     with pipelined reads and writes, NVMe without them. --repeats
     interleaved rounds; medians with min..max.
  3. The parameter tier: the same model at ZeRO 3 resident and with
     offload_param nvme (max_in_cpu 0: the whole shard on the drive, five
     windows read a layer ahead), interleaved with the runs above.

Reported per NVMe run: step time and its ratio to the resident step; the
optimizer phase's time; the swap bytes moved per step (every piece read and
written once); the swap bandwidth during training = those bytes / the
optimizer phase's time (compute included, so a lower bound of the I/O's
own rate) as a fraction of fio's (read + write) / 2; and the fraction of
the I/O hidden behind the update = 1 - I/O wait / optimizer phase.

Usage: python3 bench/bench_offload.py [--build-dir build] [--dir DIR] [--repeats 3]
                                      [--steps 4] [--warmup 1] [--threads 1]
"""
import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import bench_gpt  # noqa: E402  (ADAMW, thread_env)
import bench_dp  # noqa: E402  (last_json)

MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 64, "n_layer": 4, "n_head": 8,
         "d_model": 512, "seed": 5}
MICRO = 4
SUB_GROUP = 2_000_000  # 7 pieces of 24 MB


def config(threads, device, pipeline, swap_dir, stage=1, params=False):
    c = {"train_batch_size": MICRO, "train_micro_batch_size_per_gpu": MICRO,
         "optimizer": {"type": "AdamW", "params": bench_gpt.ADAMW},
         "bf16": {"enabled": True},
         "zero_optimization": {"stage": stage, "sub_group_size": SUB_GROUP},
         "dstrain": {"num_threads": threads}}
    if params:
        c["zero_optimization"]["offload_param"] = {
            "device": "nvme", "nvme_path": str(swap_dir), "buffer_count": 5, "max_in_cpu": 0}
        c["aio"] = {"block_size": 1048576, "queue_depth": 8}
    if device == "nvme":
        c["zero_optimization"]["offload_optimizer"] = {
            "device": "nvme", "nvme_path": str(swap_dir), "buffer_count": 4,
            "pipeline_read": pipeline, "pipeline_write": pipeline}
    return c


def fio(directory, rw):
    out = subprocess.run(
        ["fio", "--name=probe", f"--directory={directory}", f"--rw={rw}", "--bs=1M",
         "--size=512M", "--direct=1", "--ioengine=io_uring", "--iodepth=8", "--end_fsync=1",
         "--output-format=json"], capture_output=True, text=True, check=True).stdout
    job = json.loads(out)["jobs"][0]
    return job["write" if rw == "write" else "read"]["bw_bytes"]


def io_probe(build, directory):
    out = subprocess.run([str(build / "dstrain"), "io-probe", str(directory), "--json",
                          "--size", str(512 << 20)], capture_output=True, text=True,
                         check=True).stdout
    report = json.loads(out)
    for r in report["results"]:
        if r["block_size"] == 1 << 20 and r["queue_depth"] == 8:
            return r["write_bytes_per_second"], r["read_bytes_per_second"], report
    raise SystemExit("io-probe did not measure 1 MiB x 8")


def train(build, tmp, name, cfg, args):
    path, model = tmp / f"{name}.json", tmp / "model.json"
    path.write_text(json.dumps(cfg))
    model.write_text(json.dumps(MODEL))
    cmd = [str(build / "bench" / "bench_gpt_dstrain"), "--model", str(model), "--config",
           str(path), "--warmup", str(args.warmup), "--steps", str(args.steps)]
    out = subprocess.run(cmd, env=bench_gpt.thread_env(args.threads), capture_output=True,
                         text=True, check=True).stdout
    return bench_dp.last_json(out)


def spread(values, fmt="{:.3f}"):
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}..{fmt.format(max(values))})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", default=str(REPO / "build"))
    parser.add_argument("--dir", default=None, help="where the swap files go (default: a "
                        "temporary directory under /var/tmp)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    build = pathlib.Path(args.build_dir)
    base = pathlib.Path(args.dir) if args.dir else pathlib.Path(
        tempfile.mkdtemp(prefix="dstrain_offload_", dir="/var/tmp"))
    swap = base / "swap"
    swap.mkdir(parents=True, exist_ok=True)

    print(f"== the drive under {base} ==")
    fio_w, fio_r = fio(base, "write"), fio(base, "read")
    ours_w, ours_r, report = io_probe(build, base)
    print(f"fio      1 MiB x 8: write {fio_w / 1e6:8.0f} MB/s  read {fio_r / 1e6:8.0f} MB/s")
    print(f"io-probe 1 MiB x 8: write {ours_w / 1e6:8.0f} MB/s  read {ours_r / 1e6:8.0f} MB/s"
          f"  ({ours_w / fio_w:.2f} / {ours_r / fio_r:.2f} of fio; engine {report['engine']}, "
          f"{'O_DIRECT' if report['direct_io'] else 'buffered'})")
    best = report["best"]
    print(f"io-probe best: {best['block_size'] >> 10} KiB x {best['queue_depth']}: write "
          f"{best['write_bytes_per_second'] / 1e6:.0f}, read {best['read_bytes_per_second'] / 1e6:.0f}"
          " MB/s")

    runs = {"resident": [], "nvme pipelined": [], "nvme serial": []}
    param_runs = {"zero3 resident": [], "zero3 params nvme": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for _ in range(args.repeats):
            for name in runs:
                device = "nvme" if name.startswith("nvme") else "none"
                cfg = config(args.threads, device, name.endswith("pipelined"), swap)
                runs[name].append(train(build, tmp, name.replace(" ", "_"), cfg, args))
            for name in param_runs:
                cfg = config(args.threads, "none", False, swap, stage=3,
                             params=name.endswith("nvme"))
                param_runs[name].append(train(build, tmp, name.replace(" ", "_"), cfg, args))
    shutil.rmtree(swap, ignore_errors=True)

    resident = [r["mean_step_seconds"] for r in runs["resident"]]
    state = runs["resident"][0]["metrics"]["memory"]["optimizer_state"]["bytes"]
    print(f"\n== training: {runs['resident'][0]['metrics']['num_parameters'] / 1e6:.1f}M "
          f"parameters, bf16, ZeRO 1, {args.threads} thread(s), micro-batch {MICRO}, "
          f"optimizer state {state / 2**20:.0f} MiB; median (min..max) of {args.repeats} ==")
    print(f"{'run':>15} {'step s':>22} {'vs resident':>12} {'opt phase s':>12} "
          f"{'swap MB/step':>13} {'swap MB/s':>10} {'of fio':>7} {'hidden':>7} {'RSS MiB':>8}")
    fio_mean = (fio_w + fio_r) / 2
    for name, rs in runs.items():
        steps = [r["mean_step_seconds"] for r in rs]
        ratio = [s / statistics.median(resident) for s in steps]
        phase = [r["metrics"]["time_seconds"]["last_step"]["step"] for r in rs]
        rss = statistics.median(r["metrics"]["process_rss_bytes"] for r in rs) / 2**20
        if name == "resident":
            print(f"{name:>15} {spread(steps):>22} {'1.00':>12} {statistics.median(phase):>12.3f}"
                  f" {'-':>13} {'-':>10} {'-':>7} {'-':>7} {rss:>8.0f}")
            continue
        o = rs[0]["metrics"]["offload"]["optimizer"]
        passes = args.warmup + args.steps + 1  # the initial master weights were one pass
        per_step = (o["read_bytes"] + o["write_bytes"]) / passes
        bandwidth = [per_step / p for p in phase]
        hidden = [1 - (r["metrics"]["offload"]["optimizer"]["io_wait_seconds"] / passes) / p
                  for r, p in zip(rs, phase)]
        print(f"{name:>15} {spread(steps):>22} {statistics.median(ratio):>12.2f} "
              f"{statistics.median(phase):>12.3f} {per_step / 1e6:>13.0f} "
              f"{statistics.median(bandwidth) / 1e6:>10.0f} "
              f"{statistics.median(bandwidth) / fio_mean:>7.2f} {statistics.median(hidden):>7.2f}"
              f" {rss:>8.0f}")

    print(f"\n== the parameter tier: ZeRO 3, the whole shard on NVMe (5 windows), optimizer "
          f"resident; median (min..max) of {args.repeats} ==")
    base = statistics.median(r["mean_step_seconds"] for r in param_runs["zero3 resident"])
    print(f"{'run':>18} {'step s':>22} {'vs resident':>12} {'read MB/step':>13} "
          f"{'wait s/step':>12} {'hidden':>7} {'params MiB':>11}")
    for name, rs in param_runs.items():
        steps = [r["mean_step_seconds"] for r in rs]
        params_mib = statistics.median(
            r["metrics"]["memory"]["parameters"]["bytes"] for r in rs) / 2**20
        p = rs[0]["metrics"]["offload"]["param"]
        if not p.get("moved"):
            print(f"{name:>18} {spread(steps):>22} {'1.00':>12} {'-':>13} {'-':>12} {'-':>7} "
                  f"{params_mib:>11.1f}")
            continue
        n = args.warmup + args.steps
        read = statistics.median(r["metrics"]["offload"]["param"]["read_bytes"] for r in rs) / n
        wait = [r["metrics"]["offload"]["param"]["io_wait_seconds"] / n for r in rs]
        # Hidden: 1 - the time the gathers waited / the time the reads took at fio's rate.
        hidden = 1 - statistics.median(wait) / (read / fio_r)
        print(f"{name:>18} {spread(steps):>22} {statistics.median(steps) / base:>12.2f} "
              f"{read / 1e6:>13.0f} {statistics.median(wait):>12.3f} {hidden:>7.2f} "
              f"{params_mib:>11.1f}")


if __name__ == "__main__":
    main()
