"""The same seed gives the same losses from Python, C and Rust.

The recipe: GPT {vocab 256, n_ctx 16, 1 layer, 2 heads, d_model 16, seed 5},
AdamW lr 1e-3, micro-batch 2, accumulation 1, one thread; 5 steps on
Dataset.open_text(default corpus, seed 7) train batches with
batch_index = step, 2 samples x 16 tokens. Each program prints one line per
step in the shared format

    step K loss_bits 0xXXXXXXXX        (the float32 loss's IEEE-754 bits)

and the lines must be identical. (Other spellings are read too, for programs
that print differently: hex floats such as C's %a or Python's float.hex, or
decimal text that round-trips float32.)

    python3 tests/python/sdk/test_cross_language.py          # the shared format
    python3 tests/python/sdk/test_cross_language.py --hex    # float.hex per step

The C program is examples/c/same_seed.c (compiled here against the build's
library), the Rust one `cargo run --example same_seed`; each comparison skips
until its program exists.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
from typing import List

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]

MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 1, "n_head": 2,
         "d_model": 16, "seed": 5}
CONFIG = {
    "train_batch_size": 2,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "dstrain": {"num_threads": 1},
}
STEPS, SEQ_LEN, DATA_SEED = 5, 16, 7


def python_losses(dstrain) -> List[float]:
    with dstrain.Dataset.open_text(None, seed=DATA_SEED) as data:
        with dstrain.Engine(config=CONFIG, model=MODEL) as engine:
            n = engine.info.local_batch_size
            return [engine.train_batch(*data.batch("train", step, n, SEQ_LEN))
                    for step in range(STEPS)]


_HEX = r"[-+]?0x[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?p[-+]?\d+"
_BITS = r"loss_bits\s+0x([0-9a-fA-F]{8})\b"


def shared_format(losses: List[float]) -> List[str]:
    """The lines every same_seed program prints."""
    return [f"step {k} loss_bits 0x{struct.unpack('<I', struct.pack('<f', x))[0]:08x}"
            for k, x in enumerate(losses)]
_DEC = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"


def parse_losses(stdout: str) -> List[float]:
    """One loss per line that has one: float32 bits, a hex float, or decimal."""
    values = []
    for line in stdout.splitlines():
        bits = re.search(_BITS, line)
        if bits:
            values.append(struct.unpack("<f", struct.pack("<I", int(bits.group(1), 16)))[0])
            continue
        hexes = re.findall(_HEX, line)
        if hexes:
            values.append(float.fromhex(hexes[-1]))
            continue
        decimals = re.findall(r"(?<![\w.])" + _DEC + r"(?![\w.])", line)
        if "loss" in line.lower() and decimals:
            values.append(float(decimals[-1]))
    return values


def as_float32(values: List[float]) -> List[str]:
    return [float.hex(float(np.float32(v))) for v in values]


@pytest.fixture(scope="module")
def reference(dst):
    try:
        losses = python_losses(dst)
    except dst.DstrainIOError as error:
        pytest.skip(f"the recipe reads the default corpus, which is missing: {error}")
    print("python losses:", [float.hex(x) for x in losses])
    print("\n".join(shared_format(losses)))
    return losses


def test_python_is_deterministic(dst, reference):
    assert len(reference) == STEPS and all(np.isfinite(reference))
    assert python_losses(dst) == reference


def _env(build_dir):
    env = dict(os.environ, DSTRAIN_BUILD_DIR=str(build_dir), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [str(build_dir)] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    return env


def test_c_matches(reference, sdk_build_dir, tmp_path):
    source = REPO / "examples" / "c" / "same_seed.c"
    if not source.exists():
        pytest.skip("examples/c/same_seed.c does not exist yet")
    built = [p for p in (sdk_build_dir / "examples" / "c" / "same_seed",
                         sdk_build_dir / "same_seed") if p.exists()]
    if built:
        binary = built[0]
    else:
        compiler = shutil.which("cc") or shutil.which("gcc")
        if not compiler:
            pytest.skip("no C compiler to build examples/c/same_seed.c")
        binary = tmp_path / "same_seed"
        subprocess.run([compiler, "-std=c99", "-O2", "-I", str(REPO / "capi" / "include"),
                        str(source), "-o", str(binary), "-L", str(sdk_build_dir), "-ldstrain",
                        f"-Wl,-rpath,{sdk_build_dir}", "-lm"], check=True, timeout=120)
    out = subprocess.run([str(binary)], env=_env(sdk_build_dir), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    compare(out.stdout, reference, "examples/c/same_seed.c")


def compare(stdout: str, reference: List[float], program: str) -> None:
    got = as_float32(parse_losses(stdout))
    assert got == as_float32(reference), (
        f"{program} printed\n{stdout}\nPython (same recipe):\n" + "\n".join(shared_format(reference)))
    if "loss_bits" in stdout:  # the shared format: the text is identical too
        lines = [l.strip() for l in stdout.splitlines() if "loss_bits" in l]
        assert lines == shared_format(reference)


def test_rust_matches(reference, sdk_build_dir):
    examples = [p for root in (REPO / "sdk-rust", REPO / "examples" / "rust") if root.exists()
                for p in root.rglob("same_seed.rs") if "target" not in p.parts]
    if not examples:
        pytest.skip("no Rust same_seed example yet (cargo run --example same_seed)")
    if not shutil.which("cargo"):
        pytest.skip("cargo is not installed")
    manifest = next(p / "Cargo.toml" for p in examples[0].parents if (p / "Cargo.toml").exists())
    out = subprocess.run(["cargo", "run", "--offline", "--quiet", "--manifest-path",
                          str(manifest), "--example", "same_seed"],
                         env=_env(sdk_build_dir), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    compare(out.stdout, reference, "cargo run --example same_seed")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "sdk-python" / "src"))
    import dstrain as _dstrain

    _losses = python_losses(_dstrain)
    if "--hex" in sys.argv[1:]:
        for _step, _loss in enumerate(_losses):
            print(f"step {_step} loss {float.hex(_loss)}")
    else:
        print("\n".join(shared_format(_losses)))
