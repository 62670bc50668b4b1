"""`pip install ./sdk-python` works offline: into a fresh venv (with Debian's
cffi and numpy visible through --system-site-packages), with pip's default
build isolation and --no-index so nothing can be downloaded. The installed
package imports, ships py.typed and the dstrain-launch script; the wheel and
sdist build the same way."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

from sdk_support import REPO

SDK = REPO / "sdk-python"


def pip_env(tmp_path):
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):
        env.pop(key, None)
    env.update(PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1", HOME=str(tmp_path / "home"))
    return env


def have_pip():
    return subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True,
                          timeout=60).returncode == 0


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    if not have_pip():
        pytest.skip("pip is not installed for this Python (Debian: apt-get install python3-pip)")
    root = tmp_path_factory.mktemp("venv")
    # --without-pip: the venv uses the system pip through --system-site-packages
    # (fast; python3-venv's ensurepip is not needed).
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(root / "env")], check=True, timeout=120)
    return root / "env"


def test_pip_install_offline(venv, tmp_path, subprocess_env):
    python = venv / "bin" / "python"
    out = subprocess.run([str(python), "-m", "pip", "install", str(SDK)], env=pip_env(tmp_path),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (SDK / "build").exists() and not list(SDK.glob("*.egg-info"))  # tree untouched

    env = dict(subprocess_env)
    env.pop("PYTHONPATH")
    code = ("import dstrain, pathlib; print(dstrain.__file__); print(dstrain.version()); "
            "print((pathlib.Path(dstrain.__file__).parent / 'py.typed').exists())")
    run = subprocess.run([str(python), "-c", code], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    path, version, typed = run.stdout.split()
    assert path.startswith(str(venv)) and version.count(".") == 2 and typed == "True"

    script = venv / "bin" / "dstrain-launch"
    assert script.exists()
    launched = subprocess.run([str(script), "-n", "2"],
                              env=dict(env, DSTRAIN_CLI=str(tmp_path / "missing")),
                              capture_output=True, text=True, timeout=120)
    assert launched.returncode == 127 and "cannot find the dstrain command" in launched.stderr


def test_wheel_and_sdist(tmp_path):
    if not have_pip():
        pytest.skip("pip is not installed for this Python")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w",
                          str(tmp_path / "dist"), str(SDK)], env=pip_env(tmp_path),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp_path / "dist").glob("dstrain-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        version = wheel.name.split("-")[1]
        meta = zf.read(f"dstrain-{version}.dist-info/METADATA").decode()
        entry = zf.read(f"dstrain-{version}.dist-info/entry_points.txt").decode()
    for name in ("dstrain/__init__.py", "dstrain/_cdef.py", "dstrain/py.typed",
                 "dstrain_launch.py", f"dstrain-{version}.dist-info/RECORD"):
        assert name in names
    assert "Requires-Dist: cffi" in meta and "Requires-Dist: numpy" in meta
    assert "dstrain-launch = dstrain_launch:main" in entry

    sys.path.insert(0, str(SDK / "build_backend"))
    try:
        import dstrain_build
    finally:
        sys.path.pop(0)
    sdist = dstrain_build.build_sdist(str(tmp_path / "sdist"))
    with tarfile.open(tmp_path / "sdist" / sdist) as tf:
        names = set(tf.getnames())
    base = sdist[: -len(".tar.gz")]
    assert {f"{base}/pyproject.toml", f"{base}/PKG-INFO", f"{base}/src/dstrain/engine.py",
            f"{base}/build_backend/dstrain_build.py"} <= names
    # The same sources give the same wheel.
    again = dstrain_build.build_wheel(str(tmp_path / "again"))
    assert (tmp_path / "again" / again).read_bytes() == wheel.read_bytes()
