"""Byte-level token datasets (``dst_dataset_*``): the corpus and the
deterministic sampler the ``dstrain`` CLI uses."""

from __future__ import annotations

import enum
import os
import threading
from typing import Any, Optional, Tuple, Union

import numpy as np
from numpy.typing import NDArray

from ._lib import check, encode, ffi, lib, pointer, string
from .errors import StateError

__all__ = ["Dataset", "Split", "SplitLike"]


class Split(enum.IntEnum):
    """Mirror of ``dst_split_t``."""

    TRAIN = 0
    VAL = 1


#: A split: :class:`Split`, 0/1, or "train" / "val" ("validation").
SplitLike = Union[Split, int, str]

_SPLIT_NAMES = {"train": Split.TRAIN, "val": Split.VAL, "valid": Split.VAL,
                "validation": Split.VAL}


def _split(value: SplitLike) -> Split:
    if isinstance(value, str):
        try:
            return _SPLIT_NAMES[value.lower()]
        except KeyError:
            raise ValueError(f"dstrain: split must be 'train' or 'val', got {value!r}") from None
    return Split(value)


class Dataset:
    """A text file as a byte-level token stream (vocab 256) with a train and
    a validation split, sampled statelessly: a batch is a function of
    (seed, split, batch index, sample index).

    Create with :meth:`open_text`. Use as a context manager or call
    :meth:`close`.
    """

    def __init__(self, _handle: Any) -> None:
        """Internal: use :meth:`open_text`."""
        self._lock = threading.Lock()
        self._handle: Any = _handle

    @classmethod
    def open_text(
        cls,
        path: Union[str, "os.PathLike[str]", None] = None,
        val_fraction: float = 0.1,
        seed: int = 1234,
    ) -> "Dataset":
        """Opens a text file; the last `val_fraction` of its bytes is the
        validation split. `path` None opens the default corpus (Debian's
        ``fortunes``, or ``$DSTRAIN_DEFAULT_CORPUS_DIR``).

        Raises:
            DstrainIOError: the file (or the default corpus) cannot be read.
            InvalidArgumentError: a bad `val_fraction`.
        """
        c_path = encode(None if path is None else os.fspath(path))
        out = ffi.new("dst_dataset_t **")
        check(lib.dst_dataset_open_text(out, c_path, float(val_fraction), int(seed)))
        return cls(ffi.gc(out[0], lib.dst_dataset_destroy))

    @classmethod
    def open_tokens(
        cls,
        path: Union[str, "os.PathLike[str]"],
        val_fraction: float = 0.1,
        seed: int = 1234,
    ) -> "Dataset":
        """Opens a file of uint16 token ids: llm.c's ``.bin`` (256 x int32
        header, magic 20240520) or nanoGPT's raw ``train.bin`` / ``val.bin``
        (``dst_dataset_open_tokens``); the last `val_fraction` of the tokens
        is the validation split.

        Raises:
            DstrainIOError: the file cannot be read, is truncated, or has an odd size.
        """
        out = ffi.new("dst_dataset_t **")
        check(lib.dst_dataset_open_tokens(out, encode(os.fspath(path)), float(val_fraction),
                                          int(seed)))
        return cls(ffi.gc(out[0], lib.dst_dataset_destroy))

    @property
    def max_token(self) -> int:
        """The largest token id in the data (at most 255 for text)."""
        out = ffi.new("int64_t *")
        with self._lock:
            check(lib.dst_dataset_max_token(self._h(), out))
        return int(out[0])

    def _h(self) -> Any:
        handle = self._handle
        if handle is None:
            raise StateError("dstrain: this Dataset is closed; open a new one")
        return handle

    def close(self) -> None:
        """Frees the dataset (idempotent)."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                ffi.release(handle)

    def __enter__(self) -> "Dataset":
        self._h()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    def __repr__(self) -> str:
        if self._handle is None:
            return "<dstrain.Dataset (closed)>"
        return f"<dstrain.Dataset {self.path!r}>"

    @property
    def path(self) -> str:
        """The file (or, for the default corpus, the directory) read."""
        out = ffi.new("const char **")
        with self._lock:
            check(lib.dst_dataset_path(self._h(), out))
            return string(out[0])

    def num_tokens(self, split: SplitLike = Split.TRAIN) -> int:
        """Tokens (bytes) in a split."""
        out = ffi.new("size_t *")
        with self._lock:
            check(lib.dst_dataset_num_tokens(self._h(), _split(split), out))
        return int(out[0])

    def batch(
        self,
        split: SplitLike,
        batch_index: int,
        n_samples: int,
        seq_len: int,
        first_sample: int = 0,
    ) -> Tuple[NDArray[np.int32], NDArray[np.int32]]:
        """``(tokens, targets)``: int32 arrays ``[n_samples, seq_len]`` of
        random windows of the split, targets shifted by one.

        Sample j depends only on (seed, split, batch_index, first_sample + j):
        a data-parallel rank r asking for ``first_sample = r * n_samples``
        gets its slice of the batch a single rank would see.
        """
        if n_samples < 0 or seq_len < 0 or batch_index < 0 or first_sample < 0:
            raise ValueError("dstrain: batch_index, n_samples, seq_len and first_sample must be >= 0")
        tokens = np.empty((n_samples, seq_len), dtype=np.int32)
        targets = np.empty((n_samples, seq_len), dtype=np.int32)
        # from_buffer refuses 0-byte arrays on some cffi versions; the library
        # reports the zero size itself.
        t_ptr = pointer("int32_t[]", tokens, writable=True) if tokens.size else ffi.NULL
        g_ptr = pointer("int32_t[]", targets, writable=True) if targets.size else ffi.NULL
        with self._lock:
            check(
                lib.dst_dataset_batch(
                    self._h(), _split(split), batch_index, first_sample, n_samples, seq_len,
                    t_ptr, g_ptr, tokens.size,
                )
            )
        return tokens, targets

    def read(self, split: SplitLike, offset: int = 0, count: Optional[int] = None) -> NDArray[np.int32]:
        """The split's tokens ``[offset, offset + count)`` in order (``count``
        None: to the split's end): an evaluation's windows over a whole file."""
        if count is None:
            count = self.num_tokens(split) - offset
        if offset < 0 or count < 0:
            raise ValueError("dstrain: offset and count must be >= 0")
        out = np.empty(count, dtype=np.int32)
        ptr = pointer("int32_t[]", out, writable=True) if out.size else ffi.NULL
        with self._lock:
            check(lib.dst_dataset_read(self._h(), _split(split), offset, ptr, count))
        return out
