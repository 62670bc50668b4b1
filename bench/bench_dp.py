#!/usr/bin/python3
"""Data-parallel benchmarks (not tests; DESIGN.md §7), in one run:

1. Collective bus bandwidth of dstrain's Gloo communicator over message sizes
   (nccl-tests definitions) on loopback, 2 ranks.
2. Data-parallel training throughput on 2 ranks, 1 thread each: dstrain
   (ZeRO stages 0-3 with overlap_comm, in fp32 and in each precision of
   --precisions, e.g. fp16) vs PyTorch DistributedDataParallel (gloo
   backend, fp32), same GPT as bench_gpt.py, same micro-batch per rank,
   printed as a ratio.
   The fraction of communication hidden behind backward is 1 - exposed / total,
   exposed being the wait after backward plus the parameter all-gather.
3. Per-rank model-state memory for ZeRO stages 0-3 at dp 2 and 4 from
   `dstrain estimate`, beside the ZeRO paper's formulas.

Usage: python3 bench/bench_dp.py [--build-dir build] [--steps 4] [--warmup 1]
                                 [--precisions fp32,fp16]
"""
import argparse
import json
import pathlib
import secrets
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import bench_gpt  # noqa: E402  (shares MODEL, MICRO_BATCH, ADAMW)
import peer_env  # noqa: E402

WORLD = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, world, port, token):
    env = peer_env.peer_env(1)  # OpenBLAS's tuning variables removed
    env.update({"RANK": str(rank),
                "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "DSTRAIN_JOB_TOKEN": token})
    return env


def run_ranks(cmd, world=WORLD, timeout=900, extra_env=None):
    port, token = free_port(), secrets.token_hex(8)
    procs = [subprocess.Popen(cmd, env={**rank_env(r, world, port, token), **(extra_env or {})},
                              text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for r in range(world)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"{cmd[0]} failed: {err}")
        outs.append(out)
    return outs


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{") or line.startswith("["):
            return json.loads(line)
    raise SystemExit(f"no JSON in output:\n{text}")


def comm_bandwidth(build):
    """The communicator's bus bandwidth: `dstrain comm-bench` (nccl-tests' definitions)."""
    out = run_ranks([str(build / "dstrain"), "comm-bench", "--ops",
                     "allreduce,allgather,reduce_scatter", "-b", "1048576", "-e", "67108864"])[0]
    print(out)
    return out


def dstrain_dp(build, tmp, stage, args, precision="fp32"):
    config = bench_gpt.ds_config(1)
    config["train_batch_size"] = bench_gpt.MICRO_BATCH * WORLD
    config["zero_optimization"] = {"stage": stage, "overlap_comm": True,
                                   "reduce_bucket_size": 2_000_000}
    if precision != "fp32":
        config[precision] = {"enabled": True}
    cfg, model = tmp / f"dp{stage}{precision}.json", tmp / "model.json"
    cfg.write_text(json.dumps(config))
    model.write_text(json.dumps(bench_gpt.MODEL))
    outs = run_ranks([str(build / "bench" / "bench_gpt_dstrain"), "--model", str(model),
                      "--config", str(cfg), "--warmup", str(args.warmup),
                      "--steps", str(args.steps)])
    per_rank = [last_json(o) for o in outs]
    step = max(r["mean_step_seconds"] for r in per_rank)
    m = per_rank[0]["metrics"]
    comm = sum(v["seconds"] for op, v in m["comm"].items() if op != "by_group")
    # Exposed communication: the wait after backward for the last gradient
    # buckets, plus (stage >= 1) the parameter all-gather after the step.
    # Stage 3's parameter gathers are measured inside forward/backward, so its
    # figure is a lower bound on what is exposed.
    exposed = m["time_seconds"]["total"]["reduce"]
    if stage >= 1:
        exposed += m["comm"]["allgather"]["seconds"]
    hidden = max(0.0, 1.0 - exposed / comm) if comm > 0 else 0.0
    return bench_gpt.MICRO_BATCH * bench_gpt.MODEL["n_ctx"] * WORLD / step, hidden, comm


def ddp_worker(args):
    """One DDP rank (env already set by the parent)."""
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import torch
    import torch.distributed as dist

    import torch_gpt

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    cfg = torch_gpt.GPTConfig.from_spec(bench_gpt.MODEL)
    net = torch_gpt.gpt2_init_(torch_gpt.GPT(cfg))
    # The causal mask is a bool buffer, which gloo cannot broadcast; it is a constant anyway.
    mask_names = [name for name, _ in net.named_buffers() if name.endswith("mask")]
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        net, mask_names)
    model = torch.nn.parallel.DistributedDataParallel(net)
    a = bench_gpt.ADAMW
    opt = torch.optim.AdamW(model.parameters(), lr=a["lr"], betas=tuple(a["betas"]),
                            eps=a["eps"], weight_decay=a["weight_decay"])
    gen = torch.Generator().manual_seed(1 + dist.get_rank())
    stream = torch.randint(0, cfg.vocab_size, (bench_gpt.MICRO_BATCH * cfg.n_ctx + 1,),
                           generator=gen)
    x = stream[:-1].view(bench_gpt.MICRO_BATCH, cfg.n_ctx)
    y = stream[1:].view(bench_gpt.MICRO_BATCH, cfg.n_ctx)

    def step():
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"mean_step_seconds": sum(times) / len(times)}))
    dist.destroy_process_group()


def torch_ddp(args, extra_env=None):
    outs = run_ranks([sys.executable, __file__, "--ddp-worker", "--steps", str(args.steps),
                      "--warmup", str(args.warmup)], extra_env=extra_env)
    step = max(last_json(o)["mean_step_seconds"] for o in outs)
    return bench_gpt.MICRO_BATCH * bench_gpt.MODEL["n_ctx"] * WORLD / step


def memory_table(build, tmp):
    print("\nPer-rank model-state memory, fp32 AdamW (bytes), dstrain estimate vs ZeRO formulas")
    print(f"{'dp':>3} {'stage':>5} {'dstrain':>12} {'formula':>12}  formula")
    cfg = tmp / "mem.json"
    for dp in (2, 4):
        config = bench_gpt.ds_config(1)
        config["train_batch_size"] = bench_gpt.MICRO_BATCH * dp
        cfg.write_text(json.dumps(config))
        model = tmp / "model.json"
        model.write_text(json.dumps(bench_gpt.MODEL))
        out = subprocess.run([str(build / "dstrain"), "estimate", "--config", str(cfg),
                              "--model", str(model), "--world-size", str(dp), "--json"],
                             capture_output=True, text=True, check=True).stdout
        est = json.loads(out)
        psi = est["num_parameters"]
        formulas = {0: (16 * psi, "16P"), 1: (8 * psi + 8 * psi / dp, "8P + 8P/N"),
                    2: (4 * psi + 12 * psi / dp, "4P + 12P/N"),
                    3: (16 * psi / dp, "16P/N (+ 4 B x persistent small tensors)")}
        for s in est["stages"]:
            f, text = formulas[s["stage"]]
            print(f"{dp:>3} {s['stage']:>5} {s['total_bytes']:>12} {int(f):>12}  {text}"
                  f"{'' if s['supported'] else '   (stage not built yet)'}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--precisions", default="fp32,fp16",
                   help="dstrain precisions to run, comma-separated (fp32, fp16, bf16)")
    p.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ddp_worker:
        return ddp_worker(args)
    build = pathlib.Path(args.build_dir).resolve()
    print(f"== collective bus bandwidth, {WORLD} ranks on loopback (Gloo, TCP) ==")
    comm_bandwidth(build)
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        print(f"\n== data-parallel training, {WORLD} ranks x 1 thread, GPT 6x384, "
              f"micro-batch {bench_gpt.MICRO_BATCH} per rank ==")
        results = {f"dstrain ZeRO-{s} {p}": dstrain_dp(build, tmp, s, args, p)
                   for p in args.precisions.split(",") for s in (0, 1, 2, 3)}
        # DDP as installed and with the best OpenBLAS core type: the ratios are
        # against the faster (bench/peer_env.py).
        ddp = 0.0
        for label, core in peer_env.peer_variants():
            tps = torch_ddp(args, {"OPENBLAS_CORETYPE": core} if core else None)
            print(f"  {'PyTorch DDP (gloo) fp32':<27} {tps:10.1f} tok/s   ({label})")
            ddp = max(ddp, tps)
        print(f"  the ratios below are against the faster DDP, {ddp:.1f} tok/s")
        for name, (tps, hidden, comm) in results.items():
            print(f"  {name:<27} {tps:10.1f} tok/s   ratio to DDP {tps / ddp:5.2f}   "
                  f"communication {comm:6.2f} s, {100 * hidden:5.1f}% hidden behind backward")
        memory_table(build, tmp)
    print()
    for line in peer_env.machine_lines(build):
        print(line)


if __name__ == "__main__":
    main()
