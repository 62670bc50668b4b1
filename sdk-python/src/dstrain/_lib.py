"""Finding, loading and version-checking libdstrain (cffi ABI mode).

Lookup order:

1. ``$DSTRAIN_LIBRARY``: a path to ``libdstrain.so``. When set, it is the only
   candidate (a file you name explicitly is never silently replaced).
2. ``$DSTRAIN_BUILD_DIR/libdstrain.so``: a CMake build directory.
3. The library the wheel was built against (``dstrain._installed``, written
   by the build backend): the install tree ``pip install
   PREFIX/share/dstrain/sdk-python`` came from, else what pkg-config knew.
   An install under any prefix is found without environment variables.
4. ``libdstrain.so.0`` through the dynamic loader (``LD_LIBRARY_PATH``,
   ``ldconfig`` cache, ``/usr/lib``...), e.g. the Debian package's.

Failure raises :class:`ImportError` listing every candidate tried and why it
failed. After loading, ``dst_version_number()`` is compared with the ABI
version this package was written for (see :mod:`dstrain._cdef`).
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from cffi import FFI

from . import _cdef, _installed
from .errors import LibraryVersionError, error_for_status

__all__ = ["ffi", "lib", "library_path", "check", "string", "pointer", "encode", "find_library"]

SONAME = "libdstrain.so.0"

ffi = FFI()
ffi.cdef(_cdef.CDEF)


def _candidates() -> List[Tuple[str, str, bool]]:
    """(description, what to dlopen, exclusive) in lookup order."""
    explicit = os.environ.get("DSTRAIN_LIBRARY")
    if explicit:
        return [(f"DSTRAIN_LIBRARY={explicit}", explicit, True)]
    found: List[Tuple[str, str, bool]] = []
    build_dir = os.environ.get("DSTRAIN_BUILD_DIR")
    if build_dir:
        path = os.path.join(build_dir, "libdstrain.so")
        found.append((f"DSTRAIN_BUILD_DIR: {path}", path, False))
    installed = _installed.LIBRARY  # set in a built wheel
    if installed:
        description = f"the library this package was installed against: {installed}"
        found.append((description, installed, False))
    found.append((f"the system loader: {SONAME}", SONAME, False))
    return found


def _loaded_path(name: str) -> Optional[str]:
    """The file the loader actually mapped for `name` (Linux: /proc/self/maps)."""
    if os.path.sep in name:
        return os.path.realpath(name)
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith(
                    "libdstrain.so"
                ):
                    return fields[5].strip()
    except OSError:
        pass
    return None


def find_library() -> Tuple[Any, str]:
    """dlopen()s the first working candidate; returns (lib, path or soname)."""
    tried: List[str] = []
    for description, target, exclusive in _candidates():
        if os.path.sep in target and not os.path.exists(target):
            tried.append(f"  {description}: no such file")
            if exclusive:
                break
            continue
        try:
            handle = ffi.dlopen(target)
        except OSError as error:
            tried.append(f"  {description}: {error}")
            if exclusive or os.path.sep in target:
                # The file exists but cannot be loaded: report it, do not
                # silently fall back to some other copy of the library.
                break
            continue
        return handle, (_loaded_path(target) or target)
    raise ImportError(
        "dstrain: cannot load libdstrain. Tried:\n"
        + "\n".join(tried)
        + "\nSet DSTRAIN_LIBRARY to the path of libdstrain.so, or DSTRAIN_BUILD_DIR to a "
        "CMake build directory of dstrain, or install the library where the loader finds it "
        "(e.g. `cmake --install build` and `ldconfig`)."
    )


def check_version(number: int, where: str) -> None:
    """Raises LibraryVersionError unless a library reporting `number`
    (major*10000 + minor*100 + patch) implements the ABI of this package."""
    major, minor, patch = number // 10000, (number // 100) % 100, number % 100
    want_major, want_minor = _cdef.DST_VERSION_MAJOR, _cdef.DST_VERSION_MINOR
    # The ABI only grows within a major version (docs/abi.md): a library of
    # this package's minor version or a later one serves it.
    ok = major == want_major and minor >= want_minor
    if not ok:
        expected = f"{want_major}.x with x >= {want_minor}"
        raise LibraryVersionError(
            f"dstrain: the library {where} is version {major}.{minor}.{patch} "
            f"(dst_version_number() = {number}), but this dstrain Python package "
            f"({_cdef.DST_VERSION_MAJOR}.{_cdef.DST_VERSION_MINOR}.{_cdef.DST_VERSION_PATCH}) "
            f"needs libdstrain {expected}. Install the Python package from the same source "
            "tree as the library (pip install ./sdk-python), or point DSTRAIN_LIBRARY at a "
            "matching libdstrain.so."
        )


lib, library_path = find_library()
check_version(int(lib.dst_version_number()), library_path)


def string(ptr: Any) -> str:
    """A library-owned `const char *` as a Python str ("" for NULL)."""
    if ptr == ffi.NULL:
        return ""
    value = ffi.string(ptr)
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def pointer(cdecl: str, buffer: Any, writable: bool = False) -> Any:
    """ffi.from_buffer: a `cdecl` pointer into `buffer`'s memory (no copy)."""
    # typeshed's cffi stubs do not list numpy arrays as buffers.
    return ffi.from_buffer(cdecl, buffer, require_writable=writable)  # type: ignore[call-overload]


def check(status: int) -> None:
    """Raises the DstrainError for a non-OK status, with dst_last_error().

    Must be called on the thread that made the failing call (the message is
    thread-local) and before any other library call on that thread.
    """
    if status != 0:
        message = string(lib.dst_last_error())
        if not message:
            message = string(lib.dst_status_string(status))
        raise error_for_status(int(status), message)


def encode(text: Optional[str]) -> Any:
    """A str as a NUL-terminated char[] (kept alive by the caller), or NULL."""
    if text is None:
        return ffi.NULL
    data = text.encode("utf-8")
    if b"\0" in data:
        raise ValueError("dstrain: strings passed to the library cannot contain NUL characters")
    return ffi.new("char[]", data)
