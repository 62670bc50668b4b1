"""Finding the library (DSTRAIN_LIBRARY, DSTRAIN_BUILD_DIR, the loader) and
the import-time version check, in child processes so each sees a fresh
import."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

IMPORT = "import dstrain; print(dstrain.library_path); print(dstrain.version())"


def run(env, code=IMPORT, cwd=None):
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_build_dir_is_used(subprocess_env, sdk_build_dir):
    out = run(subprocess_env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(str(sdk_build_dir.resolve()))


def test_dstrain_library_wins(subprocess_env, sdk_build_dir, tmp_path):
    lib = tmp_path / "copy" / "libdstrain.so"
    lib.parent.mkdir()
    shutil.copy(sdk_build_dir / "libdstrain.so", lib)
    env = dict(subprocess_env, DSTRAIN_LIBRARY=str(lib))
    out = run(env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == str(lib.resolve())


def test_missing_library_names_what_was_tried(subprocess_env, tmp_path):
    env = dict(subprocess_env, DSTRAIN_LIBRARY=str(tmp_path / "libdstrain.so"))
    out = run(env)
    assert out.returncode != 0 and "ImportError" in out.stderr
    assert f"DSTRAIN_LIBRARY={tmp_path / 'libdstrain.so'}: no such file" in out.stderr
    env = dict(subprocess_env, DSTRAIN_BUILD_DIR=str(tmp_path))
    env.pop("LD_LIBRARY_PATH", None)
    out = run(env)
    if out.returncode == 0:
        pytest.skip("an installed libdstrain.so.0 is on the loader path")
    assert f"DSTRAIN_BUILD_DIR: {tmp_path / 'libdstrain.so'}: no such file" in out.stderr
    assert "the system loader: libdstrain.so.0" in out.stderr
    assert "Set DSTRAIN_LIBRARY" in out.stderr


def test_unloadable_file(subprocess_env, tmp_path):
    bogus = tmp_path / "libdstrain.so"
    bogus.write_text("not an ELF file")
    out = run(dict(subprocess_env, DSTRAIN_LIBRARY=str(bogus)))
    assert out.returncode != 0 and f"DSTRAIN_LIBRARY={bogus}" in out.stderr


def test_version_rule(dst):
    from dstrain import _cdef, _lib
    from dstrain.errors import LibraryVersionError

    major, minor = _cdef.DST_VERSION_MAJOR, _cdef.DST_VERSION_MINOR
    _lib.check_version(major * 10000 + minor * 100 + 7, "x")  # any patch
    with pytest.raises(LibraryVersionError, match=r"is version 9\.0\.0"):
        _lib.check_version(90000, "x")
    # The ABI only grows within a major version: a later minor serves this
    # package, an earlier one may lack what it calls.
    _lib.check_version(major * 10000 + (minor + 1) * 100, "x")
    if minor > 0:
        with pytest.raises(LibraryVersionError, match=r"with x >= %d" % minor):
            _lib.check_version(major * 10000 + (minor - 1) * 100, "x")
    assert issubclass(LibraryVersionError, ImportError)


FAKE_LIBRARY = r"""
const char *dst_version(void) { return "9.8.7"; }
int dst_version_number(void) { return 90807; }
"""


def test_mismatched_library_is_refused_at_import(subprocess_env, tmp_path):
    """A library reporting another ABI version fails `import dstrain`."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        pytest.skip("no C compiler to build a fake library")
    source = tmp_path / "fake.c"
    source.write_text(FAKE_LIBRARY)
    lib = tmp_path / "libdstrain.so"
    subprocess.run([compiler, "-shared", "-fPIC", str(source), "-o", str(lib)], check=True,
                   timeout=120)
    out = run(dict(subprocess_env, DSTRAIN_LIBRARY=str(lib)))
    assert out.returncode != 0
    assert "LibraryVersionError" in out.stderr
    assert f"the library {lib} is version 9.8.7 (dst_version_number() = 90807)" in out.stderr
    assert "pip install ./sdk-python" in out.stderr
