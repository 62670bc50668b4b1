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


def build_has_test_hooks() -> bool:
    """Whether $DSTRAIN_BUILD_DIR was configured with DSTRAIN_TEST_HOOKS (the
    stand-in device and the fault injections are compiled in). True when it
    cannot tell: the build-directory fixtures report that themselves."""
    value = os.environ.get("DSTRAIN_BUILD_DIR")
    cache = pathlib.Path(value) / "CMakeCache.txt" if value else None
    if cache is None or not cache.exists():
        return True
    for line in cache.read_text(errors="replace").splitlines():
        if line.startswith("DSTRAIN_TEST_HOOKS:"):
            return line.split("=", 1)[1].strip().upper() in ("ON", "1", "TRUE", "YES")
    return False


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "test_hooks: needs a build with -DDSTRAIN_TEST_HOOKS=ON (stand-in device, "
        "fault injection)")


def pytest_runtest_setup(item):
    if item.get_closest_marker("test_hooks") and not build_has_test_hooks():
        pytest.skip("needs the test hooks, which this build leaves out: configure it with "
                    "-DDSTRAIN_TEST_HOOKS=ON (scripts/test.sh does)")


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
