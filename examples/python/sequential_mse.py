#!/usr/bin/env python3
"""A sequential model of Linear/ReLU layers learning a synthetic regression
with MSE loss -- the shape of DeepSpeed's seed example (a PipelineModule of
Linear and ReLU layers), driven through dstrain's Python SDK.

    python3 examples/python/sequential_mse.py [--steps 300] [--seed 0]

The target is a fixed random two-layer "teacher" network of the inputs plus a
little noise; the student (a deeper ReLU MLP) drives the MSE from about the
target's variance towards the noise floor. The loss is printed as it falls,
and a held-out set is evaluated with eval_batch.
"""

import argparse
import sys

import numpy as np

import dstrain

INPUT_DIM = 16
HIDDEN = 64


def model_spec(seed: int) -> dict:
    return {
        "type": "sequential",
        "input_dim": INPUT_DIM,
        "loss": "mse",
        "seed": seed,
        "layers": [
            {"type": "linear", "out_features": HIDDEN},
            {"type": "relu"},
            {"type": "linear", "out_features": HIDDEN},
            {"type": "relu"},
            {"type": "linear", "out_features": 1},
        ],
    }


DS_CONFIG = {
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 32,  # 2 micro-batches accumulated per step
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.0}},
    "scheduler": {"type": "WarmupLR",
                  "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-3,
                             "warmup_num_steps": 20}},
    "gradient_clipping": 1.0,
}


def make_data(rng: np.random.Generator, n: int, teacher) -> tuple:
    """Inputs [n, 16] float32 and labels [n, 1] float32 from the teacher."""
    w1, b1, w2 = teacher
    x = rng.standard_normal((n, INPUT_DIM)).astype(np.float32)
    y = np.maximum(x @ w1 + b1, 0.0) @ w2
    y += 0.05 * rng.standard_normal(y.shape)
    return x, y.astype(np.float32)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps (default 300)")
    p.add_argument("--print-every", type=int, default=25, help="progress every N steps")
    p.add_argument("--seed", type=int, default=0, help="data and initialisation seed")
    args = p.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    teacher = (rng.standard_normal((INPUT_DIM, 32)) / np.sqrt(INPUT_DIM),
               0.1 * rng.standard_normal(32),
               rng.standard_normal((32, 1)) / np.sqrt(32))
    x_train, y_train = make_data(rng, 4096, teacher)
    x_test, y_test = make_data(rng, 512, teacher)
    print(f"target variance {y_test.var():.4f} (the MSE of predicting the mean)")

    with dstrain.Engine(config=DS_CONFIG, model=model_spec(args.seed)) as engine:
        info = engine.info
        n = info.local_batch_size  # micro_batch_size * grad_accum_steps
        print(f"model: {len(engine.parameters())} tensors, {info.num_parameters} parameters; "
              f"{info.grad_accum_steps} x {info.micro_batch_size} samples per step")
        first = None
        for step in range(args.steps):
            idx = rng.integers(0, len(x_train), size=n)
            loss = engine.train_batch(x_train[idx], y_train[idx])  # inputs, labels
            first = loss if first is None else first
            if (step + 1) % args.print_every == 0 or step + 1 == args.steps:
                print(f"step {step + 1:4d} | train mse {loss:.5f} | lr {engine.learning_rate:.2e}",
                      flush=True)
        test = engine.eval_batch(inputs=x_test, labels=y_test)
        print(f"held-out mse {test:.5f} (first step {first:.5f}, "
              f"target variance {y_test.var():.4f})")
    return 0 if test < first else 1


if __name__ == "__main__":
    sys.exit(main())
