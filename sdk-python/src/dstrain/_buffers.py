"""Turning numpy arrays and buffer-protocol objects into C pointers.

A C-contiguous array that already has the C element type is passed to the
library as is (``ffi.from_buffer``: no copy). Anything else -- another dtype,
a strided view, a list -- is converted once into a temporary contiguous
array. The returned :class:`CBuffer` keeps whatever owns the memory alive for
as long as the pointer is used.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Tuple

import numpy as np
from numpy.typing import NDArray

from ._lib import pointer

__all__ = ["CBuffer", "as_int32", "as_float32", "writable_float32"]

_INT32_MIN = int(np.iinfo(np.int32).min)
_INT32_MAX = int(np.iinfo(np.int32).max)


class CBuffer(NamedTuple):
    """A pointer for the library and what keeps its memory alive."""

    ptr: Any  # cdata: int32_t[] / float[]
    numel: int  # elements
    shape: Tuple[int, ...]
    owner: Any  # the array whose memory `ptr` points into
    copied: bool  # True when the data had to be converted


def _as_array(obj: Any, what: str) -> NDArray[Any]:
    if isinstance(obj, np.ndarray):
        return obj
    try:
        # Buffer-protocol objects (memoryview, array.array, bytes...) become
        # views with the buffer's own format, without a copy.
        view = memoryview(obj)
    except TypeError:
        view = None
    try:
        if view is not None:
            return np.asarray(view)
        # Objects with __array__ / __array_interface__ (no copy when they allow
        # it) and sequences (copied).
        return np.asarray(obj)
    except Exception as error:  # noqa: BLE001 - re-raised with the argument's name
        raise TypeError(
            f"dstrain: {what} must be a numpy array or a buffer-protocol object, "
            f"got {type(obj).__name__}: {error}"
        ) from error


def as_int32(obj: Any, what: str) -> CBuffer:
    """`obj` as int32 (token ids, class ids, targets)."""
    arr = _as_array(obj, what)
    if arr.dtype == np.int32 and arr.flags.c_contiguous:
        return CBuffer(pointer("int32_t[]", arr), int(arr.size), arr.shape, arr, False)
    if arr.dtype.kind not in "iub":
        raise TypeError(
            f"dstrain: {what} must hold integers (int32 ids), got dtype {arr.dtype}"
        )
    if arr.size and arr.dtype.kind in "iu" and arr.dtype.itemsize >= 4:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < _INT32_MIN or hi > _INT32_MAX:
            raise ValueError(
                f"dstrain: {what} has values in [{lo}, {hi}], outside the int32 range"
            )
    conv = np.ascontiguousarray(arr, dtype=np.int32)
    return CBuffer(pointer("int32_t[]", conv), int(conv.size), arr.shape, conv, True)


def as_float32(obj: Any, what: str) -> CBuffer:
    """`obj` as float32 (inputs, labels, parameter values)."""
    arr = _as_array(obj, what)
    if arr.dtype == np.float32 and arr.flags.c_contiguous:
        return CBuffer(pointer("float[]", arr), int(arr.size), arr.shape, arr, False)
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"dstrain: {what} must hold real numbers (float32), got dtype {arr.dtype}")
    conv = np.ascontiguousarray(arr, dtype=np.float32)
    return CBuffer(pointer("float[]", conv), int(conv.size), arr.shape, conv, True)


def writable_float32(
    out: Any, shape: Tuple[int, ...], what: str
) -> Tuple[NDArray[np.float32], Any]:
    """A float32 array for the library to fill: `out` itself when given (it
    must be a writable C-contiguous float32 array), else a new one."""
    arr: NDArray[np.float32]
    if out is None:
        arr = np.empty(shape, dtype=np.float32)
    else:
        if not (
            isinstance(out, np.ndarray)
            and out.dtype == np.float32
            and out.flags.c_contiguous
            and out.flags.writeable
        ):
            raise TypeError(
                f"dstrain: out= for {what} must be a writable C-contiguous float32 numpy array"
            )
        arr = out
    return arr, pointer("float[]", arr, writable=True)
