#!/usr/bin/env python3
"""Train a small byte-level GPT on a text file with dstrain, save a checkpoint
and resume from it.

    python3 examples/python/train_gpt.py                       # default corpus, 200 steps
    python3 examples/python/train_gpt.py --data my.txt --steps 500 --save ckpt
    python3 examples/python/train_gpt.py --load ckpt --steps 800 --save ckpt   # continue

Without --data it reads the default corpus (Debian's `fortunes`, or
$DSTRAIN_DEFAULT_CORPUS_DIR). The data position is the step number (dstrain's
sampler is stateless), so a resumed run sees exactly the batches the
uninterrupted run would; with the same --steps (the cosine schedule's length)
and thread count it reproduces that run bit for bit.

After training, the last checkpoint is loaded into a fresh engine to show that
resuming restores the model exactly (without --save, a temporary directory is
used and removed).

Needs the dstrain package (pip install ./sdk-python) and libdstrain
(DSTRAIN_BUILD_DIR=build or DSTRAIN_LIBRARY=/path/libdstrain.so).
"""

import argparse
import pathlib
import sys
import tempfile
import time

import dstrain

SEQ_LEN = 64


def model_spec(seed: int) -> dict:
    return {"type": "gpt", "vocab_size": 256, "n_ctx": SEQ_LEN, "n_layer": 2,
            "n_head": 4, "d_model": 64, "seed": seed}


def ds_config(threads: int, steps: int) -> dict:
    warmup = steps // 10  # 10% of the run
    config = {
        "train_batch_size": 16,
        "train_micro_batch_size_per_gpu": 16,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
        # total_num_steps "auto" = the Engine's total_steps (--steps).
        "scheduler": {"type": "WarmupCosineLR",
                      "params": {"total_num_steps": "auto", "warmup_num_steps": warmup}},
        "gradient_clipping": 1.0,
    }
    if threads > 0:
        config["dstrain"] = {"num_threads": threads}
    return config


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="a text file (default: the default corpus)")
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps (default 200)")
    p.add_argument("--save", help="checkpoint directory (DIR/global_stepN, DIR/latest)")
    p.add_argument("--save-interval", type=int, default=0,
                   help="also save every N steps (default: only at the end)")
    p.add_argument("--load", help="resume from this checkpoint directory")
    p.add_argument("--tag", help="with --load: the tag to resume from (default: DIR/latest)")
    p.add_argument("--print-every", type=int, default=10, help="progress every N steps")
    p.add_argument("--eval-batches", type=int, default=2, help="validation batches per report")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: all)")
    p.add_argument("--seed", type=int, default=1337, help="model initialisation seed")
    return p.parse_args(argv)


def val_loss(engine, data, n_samples, batches):
    """Mean loss over the first `batches` validation batches (fixed, so
    reports are comparable across steps and runs)."""
    total = 0.0
    for i in range(batches):
        tokens, targets = data.batch("val", i, n_samples, SEQ_LEN)
        total += engine.eval_batch(tokens, targets)
    return total / batches


def main(argv=None):
    args = parse_args(argv)
    config, model = ds_config(args.threads, args.steps), model_spec(args.seed)
    data = dstrain.Dataset.open_text(args.data)
    print(f"dstrain {dstrain.version()} | data {data.path}: "
          f"{data.num_tokens('train')} train / {data.num_tokens('val')} val tokens")

    with tempfile.TemporaryDirectory(prefix="dstrain-gpt-") as scratch:
        save_dir = pathlib.Path(args.save) if args.save else pathlib.Path(scratch)
        with dstrain.Engine(config=config, model=model, total_steps=args.steps) as engine:
            info = engine.info
            n = info.local_batch_size
            print(f"model: GPT {info.num_parameters} parameters, batch {n} x {SEQ_LEN} tokens")
            if args.load:
                state = engine.load_checkpoint(args.load, tag=args.tag)
                print(f"resumed from {args.load} at step {engine.step} (client_state {state})")

            start = time.perf_counter()
            tokens_seen = 0
            while engine.step < args.steps:
                step = engine.step
                tokens, targets = data.batch("train", step, n, SEQ_LEN)  # batch index = step
                loss = engine.train_batch(tokens, targets)
                tokens_seen += tokens.size
                done = engine.step
                if done % args.print_every == 0 or done == args.steps:
                    rate = tokens_seen / max(time.perf_counter() - start, 1e-9)
                    print(f"step {done:5d}/{args.steps} | loss {loss:.6f} | "
                          f"val {val_loss(engine, data, n, args.eval_batches):.4f} | "
                          f"lr {engine.learning_rate:.2e} | {rate:,.0f} tok/s", flush=True)
                if args.save_interval and done % args.save_interval == 0 and done < args.steps:
                    path = engine.save_checkpoint(save_dir, client_state={"step": done})
                    print(f"saved {path}")

            path = engine.save_checkpoint(save_dir, client_state={"step": engine.step})
            print(f"saved {path}")
            final_val = val_loss(engine, data, n, args.eval_batches)
            final_params = engine.state_dict()

        # Resume: a fresh engine loaded from the checkpoint is the same model.
        with dstrain.Engine(config=config, model=model, total_steps=args.steps) as resumed:
            state = resumed.load_checkpoint(save_dir)
            same_params = all((resumed.get_param(k) == v).all() for k, v in final_params.items())
            resumed_val = val_loss(resumed, data, n, args.eval_batches)
            print(f"resumed {save_dir} at step {resumed.step} (client_state {state}): "
                  f"val {resumed_val:.4f}, parameters "
                  f"{'identical' if same_params else 'DIFFERENT'}")
            if not same_params or resumed_val != final_val:
                print("error: the resumed engine differs from the trained one", file=sys.stderr)
                return 1
    data.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
