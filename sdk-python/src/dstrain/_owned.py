"""The lifetime every handle-owning object shares: close (idempotent, under
the object's lock), the context manager, and the closed check."""

from __future__ import annotations

import threading
from typing import Any, TypeVar

from ._lib import ffi
from .errors import StateError

_T = TypeVar("_T", bound="Owned")


class Owned:
    """Holds ``self._handle`` (an ``ffi.gc`` pointer freed by its destructor)."""

    _handle: Any = None

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def close(self) -> None:
        """Frees the handle now (idempotent). Later calls raise :class:`StateError`."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                ffi.release(handle)

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _live(self) -> Any:
        if self._handle is None:
            raise StateError(f"dstrain: this {type(self).__name__} is closed")
        return self._handle
