"""The package's type hints hold under `mypy --strict` (PEP 561: py.typed is
shipped). Skips when mypy is not installed (Debian: apt-get install mypy)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from sdk_support import REPO


def test_mypy_strict(tmp_path):
    probe = subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True,
                           timeout=60)
    if probe.returncode != 0:
        pytest.skip("mypy is not installed (Debian package: mypy)")
    sdk = REPO / "sdk-python"
    assert (sdk / "src" / "dstrain" / "py.typed").exists()
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         str(sdk / "src" / "dstrain"), str(sdk / "src" / "dstrain_launch.py"),
         str(sdk / "build_backend")],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
