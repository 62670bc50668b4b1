"""One rank of a parallel-equivalence run, through the Python SDK.

    python3 pipeline_worker.py CONFIG.json MODEL.json STEPS [SAVE_DIR [SAVE_AT]] [--load DIR]
                               [--load-weights DIR]
                               [--seq-lens T1,T2,...]

Rank, world and rendezvous come from the environment (torchrun's contract).
Each rank first runs a forward_backward on the first batch and fingerprints
the gradients (before any step), then trains STEPS steps on its data-parallel slice of every global batch
(GPT: the default corpus; sequential: a seeded regression task), then runs
one forward_backward on the next batch and fingerprints every tensor of the
whole model (get_param / get_grad gather them from whichever stage, shard or
rank holds them): its L2 norm, its sum and its dot product with a fixed
random vector seeded by the tensor's name — three numbers that move when any
element moves. Prints one JSON line. With SAVE_DIR it saves a checkpoint
after SAVE_AT steps (default: at the end) and reports how that went; with
--load DIR it resumes from DIR and trains the steps that remain (with both,
and SAVE_AT the loaded step, it saves again at once: a resharding round trip);
with --load-weights DIR it starts from DIR's weights alone.
"""
import json
import pathlib
import sys
import zlib

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk-python" / "src"))

import dstrain  # noqa: E402


def fingerprint(name, values):
    v = np.asarray(values, dtype=np.float64).ravel()
    w = np.random.default_rng(zlib.crc32(name.encode())).standard_normal(v.size)
    return [float(np.sqrt(v @ v)), float(v.sum()), float(v @ w)]


def sequential_batch(model, index, first, n):
    """Samples [first, first + n) of global batch `index` of the regression task."""
    out_dim = [layer for layer in model["layers"] if layer["type"] == "linear"][-1]["out_features"]
    total = first + n  # one stream each, so a sample does not depend on the slice size
    inputs = np.random.default_rng([index, 0]).standard_normal((total, model["input_dim"]))
    if model.get("loss") == "cross_entropy":  # class ids
        targets = np.random.default_rng([index, 1]).integers(0, out_dim, total)
        return inputs[first:].astype(np.float32), targets[first:].astype(np.int32)
    labels = np.random.default_rng([index, 1]).standard_normal((total, out_dim))
    return inputs[first:].astype(np.float32), labels[first:].astype(np.float32)


def main():
    args = sys.argv[1:]
    load_dir = weights_dir = None
    if "--load" in args:
        at = args.index("--load")
        load_dir = args[at + 1]
        del args[at:at + 2]
    if "--load-weights" in args:
        at = args.index("--load-weights")
        weights_dir = args[at + 1]
        del args[at:at + 2]
    seq_lens = None  # GPT: the context of step i's batch cycles through these
    if "--seq-lens" in args:
        at = args.index("--seq-lens")
        seq_lens = [int(x) for x in args[at + 1].split(",")]
        del args[at:at + 2]
    config = json.loads(pathlib.Path(args[0]).read_text())
    model = json.loads(pathlib.Path(args[1]).read_text())
    steps = int(args[2])
    save_dir = args[3] if len(args) > 3 else None
    save_at = int(args[4]) if len(args) > 4 else steps
    # Every decoder family reads tokens (its context: n_ctx, or seq_length /
    # max_position_embeddings in a Hugging Face config).
    # A Hugging Face model directory: its config.json says which.
    shape = (json.loads((pathlib.Path(model["path"]) / "config.json").read_text())
             if model.get("type") == "hf" else model)
    gpt = shape.get("type", shape.get("model_type")) in ("gpt", "gpt2", "llama", "mistral", "bloom")
    context = (shape.get("n_ctx") or shape.get("n_positions") or shape.get("seq_length")
               or shape.get("max_position_embeddings"))
    data = dstrain.Dataset.open_text(seed=7) if gpt else None
    with dstrain.Engine(config=config, model=model) as engine:
        info = engine.info
        n = info.local_batch_size
        first = info.dp_rank * n

        def batch(index):
            if gpt:
                seq = seq_lens[index % len(seq_lens)] if seq_lens else context
                return data.batch("train", index, n, seq, first_sample=first)
            return sequential_batch(model, index, first, n)

        # The initial weights, as global tensors (layout-independent).
        init_params = {p.name: fingerprint(p.name, engine.get_param(p.name))
                       for p in engine.parameters()}
        # The gradients of the untrained weights first: 16-bit layouts are
        # compared there, before their roundings have moved the weights apart.
        engine.forward_backward(*batch(0))
        first_grads = {p.name: fingerprint(p.name, engine.get_grad(p.name))
                       for p in engine.parameters()}
        start = 0
        if load_dir:
            engine.load_checkpoint(load_dir)
            start = engine.step
        if weights_dir:
            engine.load_weights(weights_dir)
        save = None

        def save_now():
            try:
                engine.save_checkpoint(save_dir)
                return "ok"
            except dstrain.DstrainError as e:
                return f"{type(e).__name__}: {e}"

        # Re-save what was loaded, or save the initial weights (no steps).
        if save_dir and save_at == start and (load_dir or steps == start):
            save = save_now()
        losses = []
        for step in range(start, steps):
            losses.append(float(engine.train_batch(*batch(step))))
            if save_dir and step + 1 == save_at:
                save = save_now()
        # Model state at rest: after the steps, before forward_backward's gathered gradients.
        memory_at_rest = {k: v["bytes"] for k, v in engine.metrics()["memory"].items()}
        fb_loss = float(engine.forward_backward(*batch(steps)))
        params, grads = {}, {}
        for p in engine.parameters():
            params[p.name] = fingerprint(p.name, engine.get_param(p.name))
            grads[p.name] = fingerprint(p.name, engine.get_grad(p.name))
        print(json.dumps({"rank": info.rank, "save": save, "pp_rank": info.pp_rank,
                          "tp_rank": info.tp_rank, "init_params": init_params,
                          "dp_rank": info.dp_rank, "losses": losses, "fb_loss": fb_loss, "params": params,
                          "grads": grads, "first_grads": first_grads, "metrics": engine.metrics(),
                          "memory_at_rest": memory_at_rest}))


if __name__ == "__main__":
    main()
