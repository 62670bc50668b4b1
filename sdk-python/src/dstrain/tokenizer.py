"""Tokenizers: one ``dst_tokenizer_t`` behind a Python object."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np
from numpy.typing import NDArray

from ._lib import check, encode, ffi, lib, pointer, string
from ._owned import Owned

__all__ = ["Tokenizer"]

PathLike = Union[str, "os.PathLike[str]"]


class Tokenizer(Owned):
    """A tokenizer file (``dst_tokenizer_open``): a SentencePiece
    ``tokenizer.model``, a Hugging Face ``tokenizer.json`` (byte-level BPE),
    GPT-2's ``vocab.json`` (beside ``merges.txt``), or a directory holding one.
    Safe to use from several threads at once."""

    def __init__(self, path: PathLike) -> None:
        super().__init__()
        out = ffi.new("dst_tokenizer_t **")
        check(lib.dst_tokenizer_open(out, encode(os.fspath(path))))
        self._handle = ffi.gc(out[0], lib.dst_tokenizer_destroy)
        text = ffi.new("const char **")
        check(lib.dst_tokenizer_info_json(self._handle, text))
        self._info: Dict[str, Any] = json.loads(string(text[0]))

    @property
    def info(self) -> Dict[str, Any]:
        """kind ("sentencepiece" or "bpe"), vocab_size, bos_id, eos_id (-1: none)."""
        return dict(self._info)

    @property
    def vocab_size(self) -> int:
        return int(self._info["vocab_size"])

    @property
    def eos_id(self) -> int:
        return int(self._info["eos_id"])

    @property
    def bos_id(self) -> int:
        return int(self._info["bos_id"])

    def encode(self, text: Union[str, bytes], add_special_tokens: bool = False) -> List[int]:
        """The ids of ``text`` (str, or bytes read as UTF-8 with invalid
        sequences as U+FFFD); ``add_special_tokens``: the tokenizer's
        additions (a SentencePiece BOS, a tokenizer.json's template)."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids = ffi.new("const int32_t **")
        count = ffi.new("size_t *")
        check(lib.dst_tokenizer_encode(self._live(), data, len(data),
                                       1 if add_special_tokens else 0, ids, count))
        if not count[0]:
            return []
        unpacked: List[int] = ffi.unpack(ids[0], count[0])  # type: ignore[assignment]
        return list(unpacked)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (UTF-8; an incomplete character as U+FFFD)."""
        arr = np.ascontiguousarray(ids, dtype=np.int32).reshape(-1)
        text = ffi.new("const char **")
        length = ffi.new("size_t *")
        ptr = pointer("int32_t *", arr) if arr.size else ffi.NULL
        check(lib.dst_tokenizer_decode(self._live(), ptr, arr.size, text, length))
        data: bytes = ffi.unpack(text[0], length[0])  # type: ignore[assignment]
        return data.decode("utf-8", errors="replace")

    def tokenize_files(
        self,
        files: Sequence[PathLike],
        out: PathLike,
        val_out: Optional[PathLike] = None,
        *,
        val_fraction: float = 0.05,
        threads: int = 0,
        eos_after_files: bool = True,
        add_special_tokens: bool = False,
        chunk_bytes: int = 16 << 10,
        progress: Optional[Callable[[int, int], None]] = None,
    ) -> Dict[str, Any]:
        """Writes ``out`` (and ``val_out``) in llm.c's token-file format
        (``dst_tokenize_files``); returns {bytes, train_tokens, val_tokens,
        version, seconds}."""
        paths = [encode(os.fspath(f)) for f in files]
        array = ffi.new("const char *[]", paths)
        options: Any = ffi.new("dst_tokenize_options_t *")
        lib.dst_tokenize_options_default(options)
        options.num_threads = int(threads)
        options.val_fraction = float(val_fraction)
        options.eos_after_files = 1 if eos_after_files else 0
        options.add_special = 1 if add_special_tokens else 0
        options.chunk_bytes = int(chunk_bytes)

        def each(_user: Any, done: int, total: int) -> None:
            if progress is not None:
                progress(int(done), int(total))

        callback = (ffi.callback("void(void *, int64_t, int64_t)", each)
                    if progress is not None else ffi.NULL)
        report = ffi.new("const char **")
        c_out = encode(os.fspath(out))
        c_val = encode(os.fspath(val_out)) if val_out is not None else ffi.NULL
        check(lib.dst_tokenize_files(self._live(), array, len(paths), c_out, c_val, options,
                                     callback, ffi.NULL, report))
        result: Dict[str, Any] = json.loads(string(report[0]))
        return result
