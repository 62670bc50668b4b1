"""bench/gpu_train_check.py, the GPU session's loss check, on the guarded
stand-in: the tiny job's CPU reference, then the same job through the device
path (the CPU's bits: every difference 0, exit 0), and against a reference
moved past the bound (named OUT OF BOUND, exit 1)."""
import json
import os
import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.test_hooks  # the stand-in device

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_train_check.py"


def check(build_dir, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(["/usr/bin/python3", str(SCRIPT), "--build-dir", str(build_dir),
                           "--jobs", "tiny", *args], capture_output=True, text=True, timeout=300,
                          env=env)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, build_dir):
    ref = tmp_path_factory.mktemp("ref") / "ref.json"
    out = check(build_dir, "--write-reference", str(ref))
    assert out.returncode == 0, out.stderr
    return ref


def test_the_device_path_on_the_standin_holds_the_bound(reference, build_dir):
    out = check(build_dir, "--check", str(reference), "--device", "standin")
    assert out.returncode == 0, out.stdout + out.stderr
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("tiny: ok (bound 0.001)"), line
    assert "largest step difference 0.00e+00" in line, line
    assert len(json.loads(reference.read_text())["tiny"]["loss"]) == 6


def test_a_loss_past_the_bound_fails_the_check(reference, build_dir, tmp_path):
    refs = json.loads(reference.read_text())
    refs["tiny"]["loss"][3] *= 1.01
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(refs))
    out = check(build_dir, "--check", str(moved), "--device", "standin")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "tiny: OUT OF BOUND" in out.stdout and "at step 4" in out.stdout, out.stdout
