#!/usr/bin/python3
"""gpu_train_check: `dstrain train` with dstrain.device "cuda" against the
same job on the CPU (issue 42): each step's training loss and gradient norm and
the final validation loss, from the rank's JSON-lines metrics log and its
summary line.

Jobs (the fortunes corpus, byte-level tokens, the same seeds on both sides):
  default    the built-in job (4 layers x d_model 128, context 64, 64 samples a
             step, AdamW 4e-3 with warm-up and cosine decay), 300 steps, fp32
  gpt2-fp32  GPT-2 124M (vocabulary 50257, 12 layers x 768), 4 x 256 tokens a
             step, AdamW 3e-4, clipping 1.0, 8 steps
  gpt2-bf16  the same in bf16 (fp32 master weights)
  llama-fp32, llama-bf16, bloom-fp32, bloom-bf16
             a small LLaMA (4 layers x 256, 8 query heads over 2 key/value
             heads) and BLOOM (4 layers x 256, ALiBi), 8 x 128 tokens a step,
             AdamW 1e-3, 20 steps: the fused attention and the family kernels

Bounds (the largest relative difference of any step's loss, and of the final
validation loss): fp32 1e-3 for GPT-2 and the families (the device's GEMMs are
full fp32, no TF32, and only the reduction orders differ), bf16 2e-2 (bf16 GEMMs
accumulate in another order, and every activation rounds to bf16), the
default job 2e-2 (300 steps, fp32: an order-of-summation difference grows over
a run but stays far below what a wrong kernel gives).

Usage: bench/gpu_train_check.py --write-reference REF.json [--device cpu]
       bench/gpu_train_check.py --check REF.json [--device cuda]
       [--build-dir build] [--jobs default,gpt2-fp32,gpt2-bf16]   (or tiny: the
       script's own check, seconds on the stand-in)
Exit status 1 when a job fails or leaves its bound.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

GPT2 = {"type": "gpt", "vocab_size": 50257, "n_ctx": 1024, "n_layer": 12, "n_head": 12,
        "d_model": 768, "seed": 1}

# The built-in job's ds_config (cli/default_job.cc) for a 300-step run.
DEFAULT_CONFIG = {
    "train_batch_size": 64, "train_micro_batch_size_per_gpu": 32,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 4e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupCosineLR",
                  "params": {"total_num_steps": "auto", "warmup_num_steps": 100,
                             "warmup_type": "linear"}},
    "gradient_clipping": 1.0, "steps_per_print": 10}


def adamw_config(precision, micro_batch, lr):
    """AdamW with weight decay 0.1, clipping 1.0, and `precision` enabled."""
    config = {"train_micro_batch_size_per_gpu": micro_batch, "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.1}}}
    if precision != "fp32":
        config[precision] = {"enabled": True}
    return config


def gpt2_config(precision):
    return adamw_config(precision, 4, 3e-4)


# name -> (model spec or None for the built-in, config, steps, extra train arguments, bound)
# LLaMA with grouped-query heads and BLOOM (ALiBi, interleaved heads): the
# fused attention and the family kernels in a whole training run.
LLAMA = {"type": "llama", "vocab_size": 256, "hidden_size": 256, "intermediate_size": 688,
         "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
         "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "seed": 5}
BLOOM = {"type": "bloom", "vocab_size": 256, "hidden_size": 256, "n_layer": 4, "n_head": 8,
         "seq_length": 128, "seed": 6}


def family_config(precision):
    return adamw_config(precision, 8, 1e-3)


FAMILY_ARGS = ["--eval-interval", "20", "--eval-batches", "2"]
TINY = {"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 1, "n_head": 2, "d_model": 32,
        "seed": 3}
JOBS = {
    "default": (None, DEFAULT_CONFIG, 300, ["--eval-interval", "100", "--eval-batches", "8"], 2e-2),
    "gpt2-fp32": (GPT2, gpt2_config("fp32"), 8,
                  ["--seq-len", "256", "--eval-interval", "8", "--eval-batches", "2"], 1e-3),
    "gpt2-bf16": (GPT2, gpt2_config("bf16"), 8,
                  ["--seq-len", "256", "--eval-interval", "8", "--eval-batches", "2"], 2e-2),
    "llama-fp32": (LLAMA, family_config("fp32"), 20, FAMILY_ARGS, 1e-3),
    "llama-bf16": (LLAMA, family_config("bf16"), 20, FAMILY_ARGS, 2e-2),
    "bloom-fp32": (BLOOM, family_config("fp32"), 20, FAMILY_ARGS, 1e-3),
    "bloom-bf16": (BLOOM, family_config("bf16"), 20, FAMILY_ARGS, 2e-2),
    # (seconds anywhere: the script's own test, on the stand-in)
    "tiny": (TINY, dict(gpt2_config("fp32"), train_micro_batch_size_per_gpu=4), 6,
             ["--eval-interval", "6", "--eval-batches", "2"], 1e-3),
}
DEFAULT_JOBS = "default,gpt2-fp32,gpt2-bf16,llama-fp32,llama-bf16,bloom-fp32,bloom-bf16"


def run_job(args, name, tmp):
    model, config, steps, extra, _ = JOBS[name]
    config = json.loads(json.dumps(config))
    config["dstrain"] = {"device": "cpu" if args.device == "cpu" else "cuda",
                         "monitor": {"log": {"enabled": True, "path": str(tmp / "log"),
                                             "format": "jsonl"}}}
    (tmp / "ds.json").write_text(json.dumps(config))
    cmd = [str(pathlib.Path(args.build_dir) / "dstrain"), "train", "--config", str(tmp / "ds.json"),
           "--steps", str(steps)] + extra
    if model:
        (tmp / "model.json").write_text(json.dumps(model))
        cmd += ["--model", str(tmp / "model.json")]
    env = dict(os.environ)
    env.pop("DSTRAIN_TEST_DEVICE", None)
    if args.device == "standin":
        env["DSTRAIN_TEST_DEVICE"] = "guarded"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    if proc.returncode != 0:
        return {"error": f"{' '.join(cmd)} failed (rc {proc.returncode}): "
                         f"{(proc.stderr or proc.stdout).strip()[-2000:]}"}
    logs = sorted((tmp / "log").glob("*.jsonl"))
    rows = [json.loads(line) for line in logs[0].read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "loss" in r and "step" in r]
    final = re.search(r"final: step \d+\s+loss [0-9.]+\s+val ([0-9.]+)", proc.stdout)
    return {"loss": [r["loss"] for r in rows], "grad_norm": [r.get("grad_norm", 0.0) for r in rows],
            "tokens_per_s": [r.get("tokens_per_second", 0.0) for r in rows],
            "val": float(final.group(1)) if final else None}


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def compare(name, got, ref):
    """One line and whether the job holds its bound."""
    bound = JOBS[name][4]
    if "error" in got:
        return f"{name}: FAILED: {got['error']}", False
    if len(got["loss"]) != len(ref["loss"]):
        return f"{name}: FAILED: {len(got['loss'])} steps logged, the reference has {len(ref['loss'])}", False
    steps = [relative(a, b) for a, b in zip(got["loss"], ref["loss"])]
    worst = max(range(len(steps)), key=steps.__getitem__)
    norms = max(relative(a, b) for a, b in zip(got["grad_norm"], ref["grad_norm"]))
    val = relative(got["val"], ref["val"]) if got["val"] is not None and ref["val"] else float("inf")
    ok = steps[worst] <= bound and val <= bound
    return (f"{name}: {'ok' if ok else 'OUT OF BOUND'} (bound {bound:g}): losses "
            f"{got['loss'][0]:.4f} -> {got['loss'][-1]:.4f} (cpu {ref['loss'][0]:.4f} -> "
            f"{ref['loss'][-1]:.4f}), largest step difference {steps[worst]:.2e} at step {worst + 1}, "
            f"gradient norms {norms:.2e}, validation {got['val']} vs {ref['val']} ({val:.2e})"), ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write-reference", metavar="REF.json")
    mode.add_argument("--check", metavar="REF.json")
    ap.add_argument("--build-dir", default=os.environ.get("DSTRAIN_BUILD_DIR", "build"))
    ap.add_argument("--device", choices=["cpu", "cuda", "standin"], default=None)
    ap.add_argument("--jobs", default=DEFAULT_JOBS, help=f"of {', '.join(JOBS)}")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    args.device = args.device or ("cpu" if args.write_reference else "cuda")
    names = args.jobs.split(",")
    unknown = [n for n in names if n not in JOBS]
    if unknown:
        sys.exit(f"gpu_train_check: unknown job(s) {unknown}: choose from {list(JOBS)}")
    results = {}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            results[name] = run_job(args, name, pathlib.Path(tmp))
        print(f"{name} on {args.device}: {json.dumps(results[name])}", flush=True)
    if args.write_reference:
        failed = [n for n, r in results.items() if "error" in r]
        if failed:
            sys.exit(f"gpu_train_check: the reference run failed: {[results[n]['error'] for n in failed]}")
        pathlib.Path(args.write_reference).write_text(json.dumps(results, indent=1))
        return
    refs = json.loads(pathlib.Path(args.check).read_text())
    all_ok = True
    for name in names:
        if name not in refs:
            sys.exit(f"gpu_train_check: {args.check} has no reference for {name}: write it with "
                     "--write-reference on the CPU")
        line, ok = compare(name, results[name], refs[name])
        print(line, flush=True)
        all_ok &= ok
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
