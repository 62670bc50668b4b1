"""A self-contained PEP 517 / PEP 660 build backend for the dstrain package.

Why not setuptools: pip builds a pyproject.toml project in an isolated
environment and would first download the backend's requirements, so
``pip install ./sdk-python`` would need the network. This backend is listed
with ``backend-path`` and ``requires = []``: it is part of the source tree and
uses only the standard library, so the install works offline with or without
build isolation, with any pip that speaks PEP 517 (pip >= 19).

The package is pure Python (the C library is loaded at run time), so a wheel
is just the files of ``src/dstrain`` plus the ``.dist-info`` metadata.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, Iterable, List, Optional, Tuple

__all__ = [
    "get_requires_for_build_wheel",
    "get_requires_for_build_sdist",
    "get_requires_for_build_editable",
    "prepare_metadata_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "build_wheel",
    "build_sdist",
    "build_editable",
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
PACKAGE = "dstrain"
MODULES = ["dstrain_launch.py"]  # top-level modules shipped beside the package

NAME = "dstrain"
SUMMARY = "Python SDK of dstrain, a DeepSpeed-class training engine behind a C ABI (cffi)"
REQUIRES_PYTHON = ">=3.8"
REQUIRES_DIST = ["cffi>=1.12", "numpy>=1.21"]
CONSOLE_SCRIPTS = {"dstrain-launch": "dstrain_launch:main"}
CLASSIFIERS = [
    "Programming Language :: Python :: 3",
    "Operating System :: POSIX :: Linux",
    "Typing :: Typed",
]
TAG = "py3-none-any"

# Zip entries get a fixed timestamp so the same sources give the same wheel
# (SOURCE_DATE_EPOCH overrides it, as reproducible-builds.org specifies).
_EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01
_ZIP_TIME = time.gmtime(max(_EPOCH, 315532800))[:6]


def _version() -> str:
    with open(os.path.join(SRC, PACKAGE, "_version.py"), encoding="utf-8") as f:
        match = re.search(r'^__version__\s*=\s*"([^"]+)"', f.read(), re.MULTILINE)
    if not match:
        raise RuntimeError("src/dstrain/_version.py does not define __version__")
    return match.group(1)


def _dist_info() -> str:
    return f"{NAME}-{_version()}.dist-info"


def _metadata() -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {_version()}",
        f"Summary: {SUMMARY}",
        f"Requires-Python: {REQUIRES_PYTHON}",
    ]
    lines += [f"Classifier: {c}" for c in CLASSIFIERS]
    lines += [f"Requires-Dist: {r}" for r in REQUIRES_DIST]
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _wheel_file() -> str:
    return (
        "Wheel-Version: 1.0\n"
        f"Generator: dstrain_build {_version()}\n"
        "Root-Is-Purelib: true\n"
        f"Tag: {TAG}\n"
    )


def _entry_points() -> str:
    lines = ["[console_scripts]"]
    lines += [f"{name} = {target}" for name, target in sorted(CONSOLE_SCRIPTS.items())]
    return "\n".join(lines) + "\n"


def _metadata_files() -> Dict[str, bytes]:
    info = _dist_info()
    return {
        f"{info}/METADATA": _metadata().encode("utf-8"),
        f"{info}/WHEEL": _wheel_file().encode("utf-8"),
        f"{info}/entry_points.txt": _entry_points().encode("utf-8"),
        f"{info}/top_level.txt": "".join(
            f"{name}\n" for name in sorted([PACKAGE] + [m[: -len(".py")] for m in MODULES])
        ).encode("utf-8"),
    }


def _package_files() -> List[Tuple[str, str]]:
    """(archive name, file path) of everything shipped in the package."""
    found = [(name, os.path.join(SRC, name)) for name in MODULES]
    top = os.path.join(SRC, PACKAGE)
    for directory, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for filename in sorted(filenames):
            if filename.endswith((".py", ".typed")):
                path = os.path.join(directory, filename)
                found.append((os.path.relpath(path, SRC).replace(os.sep, "/"), path))
    return found


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(directory: str, contents: Iterable[Tuple[str, bytes]]) -> str:
    filename = f"{NAME}-{_version()}-{TAG}.whl"
    entries = list(contents) + sorted(_metadata_files().items())
    record_name = f"{_dist_info()}/RECORD"
    record = "\n".join([_record_line(n, d) for n, d in entries] + [f"{record_name},,"]) + "\n"
    entries.append((record_name, record.encode("utf-8")))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, filename)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return filename


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _installed_library() -> Optional[str]:
    """The libdstrain this wheel belongs with, found when it is built:
    the install tree it came from (``cmake --install`` puts this source at
    ``PREFIX/share/dstrain/sdk-python``, the library at ``PREFIX/lib``), else
    the one pkg-config knows. None: the package looks for it at import."""
    prefix = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
    if os.path.basename(os.path.dirname(ROOT)) == "dstrain":
        candidate = os.path.join(prefix, "lib", "libdstrain.so.0")
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    try:
        import subprocess

        libdir = subprocess.run(
            ["pkg-config", "--variable=libdir", "dstrain"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    candidate = os.path.join(libdir, "libdstrain.so.0")
    return os.path.realpath(candidate) if libdir and os.path.exists(candidate) else None


def _installed_module() -> Tuple[str, bytes]:
    """dstrain/_installed.py: where _lib looks after the environment variables."""
    library = _installed_library()
    text = (
        '"""Written when this wheel was built (build_backend/dstrain_build.py)."""\n\n'
        "from typing import Optional\n\n"
        "#: The libdstrain.so this package was installed against, or None.\n"
        f"LIBRARY: Optional[str] = {library!r}\n"
    )
    return f"{PACKAGE}/_installed.py", text.encode("utf-8")


# ------------------------------------------------------------------ PEP 517


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    for name, data in _metadata_files().items():
        path = os.path.join(metadata_directory, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    installed = _installed_module()  # replaces the source tree's (LIBRARY = None)
    files = [(n, _read(p)) for n, p in _package_files() if n != installed[0]] + [installed]
    return _write_wheel(wheel_directory, files)


def build_editable(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    """PEP 660: a wheel whose .pth file puts src/ on sys.path."""
    pth = (SRC + "\n").encode("utf-8")
    return _write_wheel(wheel_directory, [(f"__editable__.{NAME}.pth", pth)])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    base = f"{NAME}-{_version()}"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml"))]
    files.append(("build_backend/dstrain_build.py", os.path.abspath(__file__)))
    if os.path.exists(os.path.join(ROOT, "README.md")):
        files.append(("README.md", os.path.join(ROOT, "README.md")))
    files += [("src/" + n, p) for n, p in _package_files()]
    os.makedirs(sdist_directory, exist_ok=True)
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        members = [("PKG-INFO", _metadata().encode("utf-8"))]
        members += [(n, _read(p)) for n, p in files]
        for name, data in members:
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size = len(data)
            info.mtime = _EPOCH
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return filename
