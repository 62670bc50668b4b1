"""Shared setup of the Python tests: pinned threads (before torch loads), the
tests/python directory on sys.path, and the build-directory fixtures."""

import os
import pathlib
import sys

# BLAS / OpenMP pools are sized when the libraries load: set this first.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def build_dir():
    """The CMake build directory from $DSTRAIN_BUILD_DIR; skips when unset."""
    value = os.environ.get("DSTRAIN_BUILD_DIR")
    if not value:
        pytest.skip("DSTRAIN_BUILD_DIR is not set (point it at a CMake build of dstrain)")
    path = pathlib.Path(value)
    if not path.is_dir():
        pytest.fail(f"DSTRAIN_BUILD_DIR={value} is not a directory")
    return path


@pytest.fixture(scope="session")
def parity_tool(build_dir):
    """tests/tools/dst_parity_tool.cc as built by tests/CMakeLists.txt (it lands in
    the build's tests/ directory). Missing while DSTRAIN_BUILD_DIR is set = failure."""
    tool = build_dir / "tests" / "dst_parity_tool"
    if not (tool.is_file() and os.access(tool, os.X_OK)):
        pytest.fail(
            f"{tool} is missing: build it with "
            f"`cmake --build {build_dir} --target dst_parity_tool`"
        )
    return tool
