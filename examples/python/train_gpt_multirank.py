#!/usr/bin/env python3
"""Data-parallel GPT training from Python, one process per rank.

    dstrain launch --nproc-per-node 2 -- python3 examples/python/train_gpt_multirank.py

`dstrain launch` (or the `dstrain-launch` console script, torchrun, mpirun or
srun) starts the ranks; the engine reads RANK/WORLD_SIZE/MASTER_ADDR/... and
joins the job. Each rank feeds its slice of every global batch — rank r takes
samples [r*n, (r+1)*n), r its data-parallel rank (info.dp_rank) — so the job trains on exactly the batches a single
process would, and reproduces its losses. ZeRO stage 1 partitions the AdamW
state across ranks. Only rank 0 prints.
"""
import argparse

import dstrain

MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 32, "n_layer": 2, "n_head": 2,
         "d_model": 64, "seed": 1}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--stage", type=int, default=1, help="ZeRO stage")
    args = p.parse_args()
    config = {
        "train_batch_size": 16,                # global: the same for any number of ranks
        "train_micro_batch_size_per_gpu": 4,   # accumulation = 16 / (4 x ranks)
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": args.stage, "overlap_comm": True},
    }
    data = dstrain.Dataset.open_text(seed=7)
    with dstrain.Engine(config=config, model=MODEL) as engine:
        info = engine.info
        n = info.local_batch_size  # this rank's samples per step
        for step in range(args.steps):
            tokens, targets = data.batch("train", step, n, MODEL["n_ctx"],
                                         first_sample=info.dp_rank * n)
            loss = engine.train_batch(tokens, targets)  # the mean over all ranks
            if info.rank == 0 and (step + 1) % 10 == 0:
                print(f"step {step + 1:4d} | loss {loss:.6f} | ranks {info.world_size}",
                      flush=True)


if __name__ == "__main__":
    main()
