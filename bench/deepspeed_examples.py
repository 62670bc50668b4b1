#!/usr/bin/python3
"""How many of DeepSpeed's own example configs train under `dstrain train`.

Walks a checkout of DeepSpeedExamples (github.com/microsoft/DeepSpeedExamples)
for ds_config JSON files that set a batch size, and trains each for a few
steps on two ranks with a small GPT standing in for their model: the batch
keys are scaled to 2 samples per rank and micro-batch (their models and
cluster sizes do not fit here), everything else is passed as written
("auto" values as written too). Prints one line per config (trains, or the
first line of the refusal) and a count by outcome.

    python3 bench/deepspeed_examples.py DeepSpeedExamples/ [--build build] [--json out.json]
"""
import argparse
import collections
import json
import pathlib
import re
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
WORLD = 2


def ds_configs(root):
    for path in sorted(root.rglob("*.json")):
        try:
            config = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(config, dict) and any(k in config for k in BATCH_KEYS):
            yield path, config


def scaled(config):
    """The config with its batch shape at 2 samples per micro-batch, one
    micro-batch per step and rank (keys kept where they were "auto")."""
    out = dict(config)
    for key, value in (("train_micro_batch_size_per_gpu", 2), ("gradient_accumulation_steps", 1),
                       ("train_batch_size", 2 * WORLD)):
        if out.get(key) != "auto":
            out[key] = value
    return out


def reason(stderr):
    """The refusal itself: the first error line without the CLI's prefix and
    the temporary paths."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    found = next((l for l in lines if "error" in l.lower() or "not supported" in l.lower()),
                 lines[-1] if lines else "no output")
    found = re.sub(r"^dstrain: error: ", "", found)
    found = re.sub(r"^creating the engine \(config '[^']*', model '[^']*'\): ", "", found)
    return found[:300]


def run(build, config, steps):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = pathlib.Path(tmp) / "ds_config.json"
        cfg.write_text(json.dumps(config))
        cmd = [str(build / "dstrain"), "launch", "--nproc-per-node", str(WORLD), "--",
               str(build / "dstrain"), "train", "--config", str(cfg), "--model",
               str(REPO / "examples" / "configs" / "gpt_tiny.json"), "--steps", str(steps),
               "--eval-interval", "1000", "--eval-batches", "1", "-q"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp)
        except subprocess.TimeoutExpired:
            return False, "timed out after 300 s"
        return p.returncode == 0, "" if p.returncode == 0 else reason(p.stderr + p.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", type=pathlib.Path, help="a DeepSpeedExamples checkout")
    parser.add_argument("--build", type=pathlib.Path, default=REPO / "build")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", type=pathlib.Path, help="write the outcomes here")
    args = parser.parse_args()
    outcomes = []
    for path, config in ds_configs(args.examples):
        ok, why = run(args.build, scaled(config), args.steps)
        name = str(path.relative_to(args.examples))
        outcomes.append({"config": name, "trains": ok, "reason": why})
        print(f"{'trains ' if ok else 'refused'}  {name}" + ("" if ok else f"\n         {why}"),
              flush=True)
    trains = sum(o["trains"] for o in outcomes)
    print(f"\n{trains} of {len(outcomes)} configs train")
    by_reason = collections.Counter(o["reason"].split(":")[0][:80] for o in outcomes
                                    if not o["trains"])
    for why, n in by_reason.most_common():
        print(f"{n:4d}  {why}")
    if args.json:
        args.json.write_text(json.dumps(outcomes, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
