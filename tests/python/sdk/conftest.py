"""Fixtures of the Python SDK tests (sdk-python/, examples/python/).

The package is imported from the source tree (sdk-python/src), so the tests
check the code as it is, installed or not; test_install.py checks the install.
Everything that needs libdstrain skips when DSTRAIN_BUILD_DIR is unset (the
library is then found through it, as a user would with DSTRAIN_BUILD_DIR).
"""

from __future__ import annotations

import os
import pathlib
import sys
from typing import Dict

import pytest

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from sdk_support import SDK_SRC, TEXT  # noqa: E402  (also puts sdk-python/src on sys.path)


def build_dir_or_skip() -> pathlib.Path:
    value = os.environ.get("DSTRAIN_BUILD_DIR")
    if not value:
        pytest.skip("DSTRAIN_BUILD_DIR is not set (point it at a CMake build of dstrain)")
    path = pathlib.Path(value)
    if not (path / "libdstrain.so").exists():
        pytest.fail(f"DSTRAIN_BUILD_DIR={value} has no libdstrain.so: build the dstrain target")
    return path


@pytest.fixture(scope="session")
def sdk_build_dir() -> pathlib.Path:
    """$DSTRAIN_BUILD_DIR (skips when unset)."""
    return build_dir_or_skip()


@pytest.fixture(scope="session")
def dst(sdk_build_dir):
    """The dstrain package, imported from sdk-python/src."""
    import dstrain

    assert pathlib.Path(dstrain.__file__).resolve().is_relative_to(SDK_SRC), dstrain.__file__
    return dstrain


@pytest.fixture
def text_file(tmp_path) -> pathlib.Path:
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    return path


@pytest.fixture
def subprocess_env(sdk_build_dir) -> Dict[str, str]:
    """Environment for child Pythons: the source package on PYTHONPATH, one thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SDK_SRC)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["DSTRAIN_BUILD_DIR"] = str(sdk_build_dir)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.pop("DSTRAIN_LIBRARY", None)
    return env
