"""Exceptions: every non-OK ``dst_status_t`` becomes a :class:`DstrainError`.

The exception's message is the library's own (``dst_last_error()``), which
names what failed and what to do; ``.status`` is the :class:`Status` code.
Errors detected in Python before calling the library (a closed engine, an
array of the wrong kind) use the same classes with a message of their own.
"""

from __future__ import annotations

import enum
from typing import Dict, Optional, Type

__all__ = [
    "Status",
    "DstrainError",
    "InvalidArgumentError",
    "ConfigError",
    "NotSupportedError",
    "DstrainIOError",
    "CheckpointError",
    "StateError",
    "OutOfMemoryError",
    "CommError",
    "NumericError",
    "InternalError",
    "AbortedError",
    "LibraryVersionError",
    "error_for_status",
]


class Status(enum.IntEnum):
    """Mirror of ``dst_status_t`` (checked against the header by the test suite)."""

    OK = 0
    INVALID_ARGUMENT = 1  #: NULL handle or buffer, wrong size, bad value
    CONFIG = 2  #: ds_config or model spec is malformed or inconsistent
    NOT_SUPPORTED = 3  #: recognised but not built yet
    IO = 4  #: a file could not be read or written
    CHECKPOINT = 5  #: checkpoint missing, corrupt or not matching the model
    STATE = 6  #: call in the wrong order (or on a closed handle)
    OUT_OF_MEMORY = 7  #: an allocation failed
    COMM = 8  #: a collective failed or timed out
    NUMERIC = 9  #: non-finite loss or gradients
    INTERNAL = 10  #: a bug in dstrain: please report it
    ABORTED = 11  #: Engine.abort() was called while the call ran


class DstrainError(Exception):
    """Base class of every error reported by libdstrain.

    Attributes:
        status: the :class:`Status` code of the failed call.
        message: the library's message (also ``str(error)``).
    """

    status: Status = Status.INTERNAL

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            try:
                self.status = Status(status)
            except ValueError:  # a code newer than this package: keep the number
                self.status = status  # type: ignore[assignment]

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(DstrainError):
    """A NULL handle or buffer, a buffer of the wrong size, or a bad value."""

    status = Status.INVALID_ARGUMENT


class ConfigError(DstrainError):
    """The ds_config or model spec is malformed or inconsistent."""

    status = Status.CONFIG


class NotSupportedError(DstrainError):
    """The feature is recognised but not built yet."""

    status = Status.NOT_SUPPORTED


class DstrainIOError(DstrainError, OSError):
    """A file could not be read or written (also an :class:`OSError`)."""

    status = Status.IO


class CheckpointError(DstrainError):
    """A checkpoint is missing, corrupt or does not match the model."""

    status = Status.CHECKPOINT


class StateError(DstrainError):
    """A call made in the wrong order, or on a closed engine or dataset."""

    status = Status.STATE


class OutOfMemoryError(DstrainError, MemoryError):
    """An allocation failed (also a :class:`MemoryError`)."""

    status = Status.OUT_OF_MEMORY


class CommError(DstrainError):
    """A collective failed or timed out."""

    status = Status.COMM


class NumericError(DstrainError):
    """The loss or the gradients are not finite (the step was not applied)."""

    status = Status.NUMERIC


class InternalError(DstrainError):
    """A bug in dstrain: please report it with the message."""

    status = Status.INTERNAL


class AbortedError(DstrainError):
    """:meth:`Engine.abort` was called (from another thread or a signal
    handler) while this call ran; the engine is gone."""

    status = Status.ABORTED


class LibraryVersionError(ImportError):
    """The loaded libdstrain does not implement the ABI this package expects."""


_CLASSES: Dict[int, Type[DstrainError]] = {
    int(Status.INVALID_ARGUMENT): InvalidArgumentError,
    int(Status.CONFIG): ConfigError,
    int(Status.NOT_SUPPORTED): NotSupportedError,
    int(Status.IO): DstrainIOError,
    int(Status.CHECKPOINT): CheckpointError,
    int(Status.STATE): StateError,
    int(Status.OUT_OF_MEMORY): OutOfMemoryError,
    int(Status.COMM): CommError,
    int(Status.NUMERIC): NumericError,
    int(Status.INTERNAL): InternalError,
    int(Status.ABORTED): AbortedError,
}


def error_for_status(status: int, message: str) -> DstrainError:
    """The exception for a non-OK status code (unknown codes give a plain
    :class:`DstrainError` carrying the number)."""
    cls = _CLASSES.get(int(status))
    if cls is None:
        return DstrainError(message, status=int(status))
    return cls(message)
