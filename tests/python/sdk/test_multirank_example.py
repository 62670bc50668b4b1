"""The multi-rank Python example, started by `dstrain launch`, reproduces the
single-process losses (data parallelism, ZeRO stage 1)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from sdk_support import EXAMPLES

import free_ports  # on sys.path through sdk_support

TIMEOUT = 300


def free_port() -> int:
    return free_ports.free_port()


def losses(stdout: str) -> list:
    return [float(m.group(1)) for m in re.finditer(r"^step\s+\d+ \| loss (\S+)", stdout, re.M)]


def test_two_ranks_reproduce_one(subprocess_env, sdk_build_dir):
    script = [sys.executable, str(EXAMPLES / "train_gpt_multirank.py"), "--steps", "20"]
    env = dict(subprocess_env, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    single = subprocess.run(script, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert single.returncode == 0, single.stderr
    cli = os.path.join(sdk_build_dir, "dstrain")
    launched = subprocess.run(
        [cli, "launch", "--nproc-per-node", "2", "--master-port", str(free_port()), "--",
         *script], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert launched.returncode == 0, launched.stderr
    assert "ranks 2" in launched.stdout and "ranks 1" in single.stdout
    one, two = losses(single.stdout), losses(launched.stdout)
    assert len(one) == len(two) == 2, (single.stdout, launched.stdout)
    for a, b in zip(one, two):
        assert abs(a - b) <= 1e-5 * abs(a), (one, two)
