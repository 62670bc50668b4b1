#!/usr/bin/python3
"""bench_gpu_gemm: dstrain's cuBLASLt GEMM (the CUDA plugin, issue 16) against
PyTorch's torch.matmul on the same GPU, in one run, as TFLOP/s and a ratio.

Shapes: square 4096 and 8192 (the matrix units' ceiling) and the GPT-2 124M
training GEMMs at micro-batch 8 x context 1024 (8192 tokens): QKV, attention
projection, MLP up and down. Types: fp32, TF32, bf16 and fp16 operands with
fp32 accumulation. For 16-bit operands dstrain is timed three ways: an fp32 C
(what the plugin's GEMM entry writes today), a 16-bit C (what torch's 16-bit
matmul writes, the like-for-like row), and a 16-bit C with the cuBLASLt plan
(descriptors + heuristic) made once instead of per call, which shows what a
plan cache would win on the small GPT-2 shapes.

The sides are interleaved, `--reps` times each, and the median is reported
with the spread (min-max); each rep times `--iters` back-to-back GEMMs with
CUDA events.

Usage: python3 bench/bench_gpu_gemm.py [--plugin build/libdstrain_cuda.so]
       [--reps 5] [--iters 20] [--json]
"""
import argparse
import ctypes
import json
import statistics

import gpu_plugin

TYPES = {"fp32": 0, "tf32": 1, "bf16": 2, "fp16": 3}
# dst_cuda_plugin_gemm_bench's flags: (label, flags); 1 = 16-bit C, 2 = plan once.
MODES_WIDE = [("fp32 C", 0)]
MODES_16 = [("fp32 C", 0), ("16-bit C", 1), ("16-bit C, plan once", 3)]
SHAPES = [
    ("square 4096", 4096, 4096, 4096),
    ("square 8192", 8192, 8192, 8192),
    ("gpt2 qkv", 8192, 2304, 768),
    ("gpt2 attn proj", 8192, 768, 768),
    ("gpt2 mlp up", 8192, 3072, 768),
    ("gpt2 mlp down", 8192, 768, 3072),
]


def load_plugin(path):
    return gpu_plugin.entry(path, "dst_cuda_plugin_gemm_bench",
                            [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long,
                             ctypes.c_long, ctypes.c_int])


def dstrain_ms(fn, type_name, flags, m, n, k, iters):
    return gpu_plugin.time_ms(fn, "%s %dx%dx%d" % (type_name, m, n, k), TYPES[type_name], flags,
                              m, n, k, iters)


def torch_ms(torch, type_name, m, n, k, iters):
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
             "fp16": torch.float16}[type_name]
    torch.backends.cuda.matmul.allow_tf32 = type_name == "tf32"
    a = torch.rand(m, k, device="cuda", dtype=dtype) * 2 - 1
    b = torch.rand(k, n, device="cuda", dtype=dtype) * 2 - 1
    c = torch.matmul(a, b)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        torch.matmul(a, b, out=c)
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plugin", default=gpu_plugin.default_path())
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--types", default="fp32,tf32,bf16,fp16")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    fn = load_plugin(args.plugin)
    try:
        import torch
        have_torch = torch.cuda.is_available()
    except ImportError:
        torch, have_torch = None, False
    device = torch.cuda.get_device_name(0) if have_torch else "(torch.cuda unavailable)"
    rows = []
    for type_name in args.types.split(","):
        modes = MODES_WIDE if type_name in ("fp32", "tf32") else MODES_16
        for label, m, n, k in SHAPES:
            ours = {mode: [] for mode, _ in modes}
            theirs = []
            for _ in range(args.reps):  # interleaved
                for mode, flags in modes:
                    ours[mode].append(dstrain_ms(fn, type_name, flags, m, n, k, args.iters))
                if have_torch:
                    theirs.append(torch_ms(torch, type_name, m, n, k, args.iters))
            flop = 2.0 * m * n * k
            torch_row = None
            if theirs:
                torch_row = (flop / statistics.median(theirs) / 1e9, flop / max(theirs) / 1e9,
                             flop / min(theirs) / 1e9)
            for mode, _ in modes:
                times = ours[mode]
                row = {"type": type_name, "mode": mode, "shape": label, "m": m, "n": n, "k": k,
                       "dstrain_tflops": flop / statistics.median(times) / 1e9,
                       "dstrain_tflops_min": flop / max(times) / 1e9,
                       "dstrain_tflops_max": flop / min(times) / 1e9}
                if torch_row:
                    row["torch_tflops"], row["torch_tflops_min"], row["torch_tflops_max"] = torch_row
                    row["ratio"] = row["dstrain_tflops"] / row["torch_tflops"]
                rows.append(row)
                if args.json:
                    continue
                line = "%-5s %-19s %-15s %5dx%5dx%5d  dstrain %6.1f TFLOP/s (%.1f-%.1f)" % (
                    type_name, mode, label, m, n, k, row["dstrain_tflops"],
                    row["dstrain_tflops_min"], row["dstrain_tflops_max"])
                if torch_row:
                    line += "  torch %6.1f (%.1f-%.1f)  ratio %.2f" % (
                        row["torch_tflops"], row["torch_tflops_min"], row["torch_tflops_max"],
                        row["ratio"])
                print(line, flush=True)
    if args.json:
        print(json.dumps({"device": device, "reps": args.reps, "iters": args.iters,
                          "rows": rows}, indent=1))
    else:
        print("device: %s; median of %d interleaved reps of %d GEMMs each" % (
            device, args.reps, args.iters))


if __name__ == "__main__":
    main()
