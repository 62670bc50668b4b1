"""Shared setup of the Python tests: pinned threads (before torch loads), the
tests/python directory on sys.path, and the build-directory fixtures."""

import json
import os
import pathlib
import subprocess
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


_GEMM_INFO = None


def gemm_info() -> dict:
    """The GEMM part of `dstrain report --json` for $DSTRAIN_BUILD_DIR's
    library on this CPU ({} when it cannot tell)."""
    global _GEMM_INFO
    if _GEMM_INFO is None:
        _GEMM_INFO = {}
        value = os.environ.get("DSTRAIN_BUILD_DIR")
        cli = pathlib.Path(value) / "dstrain" if value else None
        if cli is not None and cli.exists():
            out = subprocess.run([str(cli), "report", "--json"], capture_output=True, text=True,
                                 timeout=120)
            if out.returncode == 0:
                _GEMM_INFO = json.loads(out.stdout).get("gemm", {})
    return _GEMM_INFO


def has_native_bf16_matmul() -> bool:
    """oneDNN multiplies bf16 natively here (AVX512-BF16 or AMX), so
    DSTRAIN_BF16_COMPUTE=on is accepted. True when it cannot tell."""
    target = gemm_info().get("target")
    return target is None or "bf16" in target or "amx" in target


def computes_bf16_by_default() -> bool:
    """bf16 training multiplies in bf16 without DSTRAIN_BF16_COMPUTE (AMX, or
    AVX512-BF16 on AMD). True when it cannot tell."""
    return gemm_info().get("bf16_compute", "bf16") == "bf16"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "test_hooks: needs a build with -DDSTRAIN_TEST_HOOKS=ON (stand-in device, "
        "fault injection)")
    config.addinivalue_line(
        "markers", "native_bf16: needs oneDNN's native bf16 matmul (AVX512-BF16 or AMX): "
        "forces DSTRAIN_BF16_COMPUTE=on")
    config.addinivalue_line(
        "markers", "bf16_compute: needs bf16 training to multiply in bf16 by default (AMX, or "
        "AVX512-BF16 on AMD)")


def pytest_runtest_setup(item):
    if item.get_closest_marker("test_hooks") and not build_has_test_hooks():
        pytest.skip("needs the test hooks, which this build leaves out: configure it with "
                    "-DDSTRAIN_TEST_HOOKS=ON (scripts/test.sh does)")
    if item.get_closest_marker("native_bf16") and not has_native_bf16_matmul():
        pytest.skip("needs a CPU with native bf16 dot products (AVX512-BF16 or AMX): oneDNN "
                    f"targets {gemm_info().get('target')} here, so DSTRAIN_BF16_COMPUTE=on is "
                    "refused")
    if item.get_closest_marker("bf16_compute") and not computes_bf16_by_default():
        pytest.skip("needs bf16 training to multiply in bf16, which it does not on this CPU: "
                    + gemm_info().get("bf16_compute_reason", ""))


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
