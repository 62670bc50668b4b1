"""One rank of test_onebit_adam.py: trains the test's sequential model on its
own samples (a function of the seed, the step and the rank) through the
Python SDK, and prints a JSON line per step with every parameter and, at the
end, the engine's metrics."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.environ["DSTRAIN_SDK"])
import dstrain  # noqa: E402


def samples(step, rank, micro):
    rng = np.random.default_rng(1000 * step + rank)
    return (rng.standard_normal((micro, 8)).astype(np.float32),
            rng.standard_normal((micro, 4)).astype(np.float32))


def main():
    config, model, steps = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
    rank = int(os.environ.get("RANK", "0"))
    micro = config["train_micro_batch_size_per_gpu"]
    with dstrain.Engine(config, model) as engine:
        names = [p.name for p in engine.parameters()]
        print(json.dumps({"params": {n: engine.get_param(n).tolist() for n in names}}), flush=True)
        for step in range(1, steps + 1):
            x, y = samples(step, rank, micro)
            loss = engine.train_batch(x, y)
            print(json.dumps({"step": step, "loss": loss,
                              "params": {n: engine.get_param(n).tolist() for n in names}}),
                  flush=True)
        print(json.dumps({"metrics": engine.metrics()}), flush=True)


if __name__ == "__main__":
    main()
