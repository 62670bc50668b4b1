#!/usr/bin/python3
"""bench_gpu_kernels: the CUDA plugin's GPT kernels (issue 16) against
PyTorch's eager CUDA kernels for the same work, on the same GPU in one run.

Shapes: GPT-2 124M's layer at micro-batch 8 x context 1024 (8192 tokens,
d_model 768, 12 heads, vocabulary 50257); AdamW over 124M parameters. All
fp32. Each side runs the work `--iters` times back to back, timed with CUDA
events, `--reps` times interleaved; the table gives the median milliseconds
with the spread and torch / dstrain (> 1: dstrain is faster).

The peers: F.gelu(tanh) and aten.gelu_backward; F.layer_norm and
aten.native_layer_norm_backward; attention (dstrain's unfused kernels, which
keep the T x T probabilities, the same through batched cuBLASLt GEMMs
(attention_gemm), and its fused flash_attention ones) against
PyTorch's memory-efficient scaled_dot_product_attention (is_causal, fp32;
fused, no T x T matrix) and, for the unfused forward, the naive
softmax(q k^T) v that keeps the T x T matrix as dstrain's unfused kernels do; F.cross_entropy forward + backward; F.embedding forward
+ backward; torch.optim.AdamW(fused=True).step(); host <-> device copies of 256 MiB
from page-locked and pageable memory against Tensor.copy_.

Usage: python3 bench/bench_gpu_kernels.py [--plugin build/libdstrain_cuda.so]
       [--reps 3] [--iters 10] [--kernels gelu_forward,...]
"""
import argparse
import ctypes
import math
import statistics
import sys

import gpu_plugin

B, T, C, H, V = 8, 1024, 768, 12, 50257
ADAM_PARAMS = 124_439_808  # GPT-2 124M (tied embedding): 162031 x 768


def load_plugin(path):
    return gpu_plugin.entry(path, "dst_cuda_plugin_kernel_bench",
                            [ctypes.c_char_p] + [ctypes.c_long] * 5 + [ctypes.c_int])


def dstrain_ms(fn, kernel, dims, iters):
    return gpu_plugin.time_ms(fn, kernel, kernel.encode(), *dims, iters)


def timed(torch, work, iters):
    work()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        work()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def torch_peers(torch):
    """kernel name -> (dims for dstrain, list of (peer label, work closure))."""
    F = torch.nn.functional
    dev = "cuda"
    rows = B * T
    x = torch.randn(rows, C, device=dev)
    dy = torch.randn(rows, C, device=dev)
    w = torch.randn(C, device=dev)
    b = torch.randn(C, device=dev)
    peers = {}
    peers["gelu_forward"] = ((B, T, C, H, V), [("F.gelu(tanh)",
                                                lambda: F.gelu(x, approximate="tanh"))])
    peers["gelu_backward"] = ((B, T, C, H, V), [("aten.gelu_backward", lambda: torch.ops.aten.gelu_backward(
        dy, x, approximate="tanh"))])
    out, mean, rstd = torch.ops.aten.native_layer_norm(x, [C], w, b, 1e-5)
    peers["layernorm_forward"] = ((B, T, C, H, V), [("F.layer_norm",
                                                     lambda: F.layer_norm(x, (C,), w, b, 1e-5))])
    peers["layernorm_backward"] = ((B, T, C, H, V), [(
        "aten.native_layer_norm_backward",
        lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [C], mean, rstd, w, b,
                                                          [True, True, True]))])
    hs = C // H
    q, k, v = (torch.randn(B, H, T, hs, device=dev, requires_grad=True) for _ in range(3))
    dy_att = torch.randn(B, H, T, hs, device=dev)
    mask = torch.ones(T, T, device=dev, dtype=torch.bool).tril()

    def naive_forward():
        with torch.no_grad():
            att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            return att @ v

    sdpa = F.scaled_dot_product_attention
    try:  # the memory-efficient kernel (fp32 has no flash kernel)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = lambda: sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION])
    except ImportError:
        import contextlib
        ctx = contextlib.nullcontext

    def sdpa_forward():
        with torch.no_grad(), ctx():
            return sdpa(q, k, v, is_causal=True)

    with ctx():
        o = sdpa(q, k, v, is_causal=True)

    def sdpa_backward():
        with ctx():
            return torch.autograd.grad(o, (q, k, v), dy_att, retain_graph=True)

    peers["attention_forward"] = ((B, T, C, H, V), [("sdpa mem-efficient", sdpa_forward),
                                                    ("naive T x T", naive_forward)])
    peers["attention_backward"] = ((B, T, C, H, V), [("sdpa mem-efficient backward",
                                                      sdpa_backward)])
    peers["attention_gemm_forward"] = ((B, T, C, H, V), [("sdpa mem-efficient", sdpa_forward),
                                                         ("naive T x T", naive_forward)])
    peers["attention_gemm_backward"] = ((B, T, C, H, V), [("sdpa mem-efficient backward",
                                                           sdpa_backward)])
    peers["flash_attention_forward"] = ((B, T, C, H, V), [("sdpa mem-efficient", sdpa_forward)])
    peers["flash_attention_backward"] = ((B, T, C, H, V), [("sdpa mem-efficient backward",
                                                            sdpa_backward)])
    logits = torch.randn(rows, V, device=dev, requires_grad=True)
    targets = torch.randint(0, V, (rows,), device=dev)

    def ce():
        loss = F.cross_entropy(logits, targets)
        return torch.autograd.grad(loss, logits)

    peers["cross_entropy"] = ((B, T, C, H, V), [("F.cross_entropy fwd+bwd", ce)])
    peers["cross_entropy_fused"] = ((B, T, C, H, V), [("F.cross_entropy fwd+bwd", ce)])
    wte = torch.randn(V, C, device=dev, requires_grad=True)
    wpe = torch.randn(T, C, device=dev, requires_grad=True)
    tokens = torch.randint(0, V, (B, T), device=dev)
    pos = torch.arange(T, device=dev)
    dout = torch.randn(B, T, C, device=dev)

    def emb():
        y = F.embedding(tokens, wte) + F.embedding(pos, wpe)
        return torch.autograd.grad(y, (wte, wpe), dout)

    peers["embedding"] = ((B, T, C, H, V), [("F.embedding fwd+bwd", emb)])
    # AdamW over the parameter count as B' x T x C elements for the plugin.
    adam_rows = ADAM_PARAMS // C
    p = torch.zeros(adam_rows * C, device=dev, requires_grad=True)
    p.grad = torch.randn_like(p) * 1e-3
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.1, fused=True)
    peers["adam"] = ((adam_rows, 1, C, H, V), [("AdamW(fused=True).step", opt.step)])
    # Host <-> device copies of 256 MiB, from page-locked and pageable memory.
    n = 64 << 20
    pinned, pageable = torch.ones(n).pin_memory(), torch.ones(n)
    on_device = torch.empty(n, device=dev)
    copy_dims = (1, 1, n, H, V)
    peers["copy_h2d_pinned"] = (copy_dims, [(
        "Tensor.copy_(pinned, non_blocking)", lambda: on_device.copy_(pinned, non_blocking=True))])
    peers["copy_h2d_pageable"] = (copy_dims, [("Tensor.copy_(pageable)",
                                               lambda: on_device.copy_(pageable))])
    peers["copy_d2h_pinned"] = (copy_dims, [(
        "pinned.copy_(device, non_blocking)", lambda: pinned.copy_(on_device, non_blocking=True))])
    peers["copy_d2h_pageable"] = (copy_dims, [("pageable.copy_(device)",
                                               lambda: pageable.copy_(on_device))])
    return peers


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plugin", default=gpu_plugin.default_path())
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--kernels", default="")
    args = parser.parse_args()
    fn = load_plugin(args.plugin)
    try:
        import torch
    except ImportError:
        sys.exit("bench_gpu_kernels: the peer needs PyTorch with CUDA; none is installed here")
    if not torch.cuda.is_available():
        sys.exit("bench_gpu_kernels: torch.cuda is unavailable here")
    peers = torch_peers(torch)
    names = args.kernels.split(",") if args.kernels else list(peers)
    print("%-24s %-30s %18s %18s %8s" % ("kernel", "peer", "dstrain ms", "torch ms",
                                         "torch/dst"))
    for name in names:
        dims, peer_list = peers[name]
        ours = []
        theirs = {label: [] for label, _ in peer_list}
        for _ in range(args.reps):  # interleaved
            ours.append(dstrain_ms(fn, name, dims, args.iters))
            for label, work in peer_list:
                theirs[label].append(timed(torch, work, args.iters))
        mine = statistics.median(ours)
        for label, _ in peer_list:
            peer = statistics.median(theirs[label])
            print("%-24s %-30s %8.3f (%.3f-%.3f) %8.3f (%.3f-%.3f) %8.2f" % (
                name, label, mine, min(ours), max(ours), peer, min(theirs[label]),
                max(theirs[label]), peer / mine), flush=True)
    print("device: %s; B=%d T=%d C=%d H=%d V=%d fp32; AdamW over %d parameters; median of %d "
          "interleaved reps of %d calls" % (torch.cuda.get_device_name(0), B, T, C, H, V,
                                             (ADAM_PARAMS // C) * C, args.reps, args.iters))


if __name__ == "__main__":
    main()
