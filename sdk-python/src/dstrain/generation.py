"""Text generation and evaluation: one ``dst_generator_t`` behind a Python object."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np
from numpy.typing import NDArray

from ._lib import check, encode, ffi, lib, pointer, string
from .engine import JsonSource, _json_or_path
from ._owned import Owned

__all__ = ["Generator", "Generated"]

PathLike = Union[str, "os.PathLike[str]"]


class Generated(list):  # type: ignore[type-arg]
    """The new tokens (a list of ints) and ``stop_reason``: "length", "eos",
    "context" or "caller"."""

    stop_reason: str = "length"


class Generator(Owned):
    """A trained language model opened for inference (``dst_generator_create``).

    Exactly one source of weights:
        checkpoint: a dstrain checkpoint directory of any training layout
            (``tag`` None: its latest), or
        model: a Hugging Face model directory (its config.json and safetensors
            weights), or a model spec (a dict, JSON text or a spec file: its
            seeded initial weights).

    Args:
        context: positions a sequence may fill, prompt included (0: the model's).
        batch: sequences one :meth:`logits` / :meth:`loss` call may carry.
        threads: CPU threads (0: DSTRAIN_NUM_THREADS, OMP_NUM_THREADS, else the cores).
        precision: "fp32" or "bf16" (bf16 weights and GEMMs).
    """

    def __init__(
        self,
        checkpoint: Optional[PathLike] = None,
        *,
        tag: Optional[str] = None,
        model: Optional[Union[JsonSource, PathLike]] = None,
        context: int = 0,
        batch: int = 1,
        threads: int = 0,
        precision: str = "fp32",
    ) -> None:
        super().__init__()
        options: Any = ffi.new("dst_generator_options_t *")
        lib.dst_generator_options_default(options)
        keep: List[Any] = []
        if checkpoint is not None:
            keep.append(encode(os.fspath(checkpoint)))
            options.checkpoint_dir = keep[-1]
        if tag is not None:
            keep.append(encode(tag))
            options.checkpoint_tag = keep[-1]
        if model is not None:
            model_json: Optional[str]
            model_path: Optional[str]
            if isinstance(model, (str, os.PathLike)) and os.path.isdir(os.fspath(model)):
                model_json, model_path = None, os.fspath(model)
            else:
                model_json, model_path = _json_or_path(model, "model")
            if model_json is not None:
                keep.append(encode(model_json))
                options.model_json = keep[-1]
            if model_path is not None:
                keep.append(encode(model_path))
                options.model_path = keep[-1]
        options.context = int(context)
        options.batch = int(batch)
        options.num_threads = int(threads)
        keep.append(encode(precision))
        options.precision = keep[-1]
        out = ffi.new("dst_generator_t **")
        check(lib.dst_generator_create(out, options))
        del keep
        self._handle = ffi.gc(out[0], lib.dst_generator_destroy)
        text = ffi.new("const char **")
        check(lib.dst_generator_info_json(self._handle, text))
        self._info: Dict[str, Any] = json.loads(string(text[0]))

    # ---------------------------------------------------------------- info

    @property
    def info(self) -> Dict[str, Any]:
        """model_type, vocab_size, context, batch, eos_token_ids, precision, model_spec."""
        return dict(self._info)

    @property
    def vocab_size(self) -> int:
        return int(self._info["vocab_size"])

    @property
    def context(self) -> int:
        return int(self._info["context"])

    # ----------------------------------------------------------- inference

    def logits(self, tokens: Any) -> NDArray[np.float32]:
        """The logits [B, T, vocab_size] of every position of ``tokens`` [B, T]
        (or [T]: one sequence, logits [T, vocab_size])."""
        arr = np.ascontiguousarray(tokens, dtype=np.int32)
        one = arr.ndim == 1
        if one:
            arr = arr[None, :]
        if arr.ndim != 2:
            raise ValueError(f"dstrain: tokens must be [B, T] or [T], got shape {arr.shape}")
        B, T = arr.shape
        out = np.empty((B, T, self.vocab_size), dtype=np.float32)
        with self._lock:
            check(lib.dst_generator_logits(self._live(), pointer("int32_t *", arr), B, T,
                                           pointer("float *", out, writable=True), out.size))
        result: NDArray[np.float32] = out[0] if one else out
        return result

    def loss(self, tokens: Any, targets: Any) -> float:
        """The mean next-token cross-entropy of ``tokens`` [B, T] against
        ``targets`` [B, T] (-1: ignored); perplexity is ``math.exp`` of it."""
        x = np.ascontiguousarray(tokens, dtype=np.int32)
        y = np.ascontiguousarray(targets, dtype=np.int32)
        if x.ndim == 1:
            x, y = x[None, :], y[None, :]
        if x.shape != y.shape or x.ndim != 2:
            raise ValueError(f"dstrain: tokens {x.shape} and targets {y.shape} must be the same [B, T]")
        out = ffi.new("double *")
        with self._lock:
            check(lib.dst_generator_loss(self._live(), pointer("int32_t *", x),
                                         pointer("int32_t *", y), x.shape[0], x.shape[1], out,
                                         ffi.NULL))
        return float(out[0])

    def generate(
        self,
        prompt: Sequence[int],
        max_new_tokens: int = 64,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        use_cache: bool = True,
        stop_at_eos: bool = True,
        on_token: Optional[Callable[[int], Optional[bool]]] = None,
    ) -> Generated:
        """Continues ``prompt`` (token ids) with up to ``max_new_tokens``
        tokens, chosen as Hugging Face's generate() does (temperature 0:
        greedy; ``top_k``, ``top_p``; the same ``seed`` gives the same
        tokens). ``on_token(token)`` is called with each as it comes;
        returning False stops."""
        arr = np.ascontiguousarray(prompt, dtype=np.int32).reshape(-1)
        sampling: Any = ffi.new("dst_sampling_t *")
        lib.dst_sampling_default(sampling)
        sampling.max_new_tokens = int(max_new_tokens)
        sampling.temperature = float(temperature)
        sampling.top_k = int(top_k)
        sampling.top_p = float(top_p)
        sampling.seed = int(seed)
        sampling.use_cache = 1 if use_cache else 0
        sampling.stop_at_eos = 1 if stop_at_eos else 0
        out = np.empty(max(int(max_new_tokens), 1), dtype=np.int32)
        count = ffi.new("size_t *")
        stop = ffi.new("const char **")
        raised: List[BaseException] = []

        def each(_user: Any, token: int) -> int:
            if on_token is None:
                return 0
            try:
                return 1 if on_token(int(token)) is False else 0
            except BaseException as e:  # re-raised after the call returns
                raised.append(e)
                return 1

        callback = ffi.callback("int(void *, int32_t)", each) if on_token is not None else ffi.NULL
        with self._lock:
            check(lib.dst_generator_generate(self._live(), pointer("int32_t *", arr), arr.size,
                                             sampling, callback, ffi.NULL,
                                             pointer("int32_t *", out, writable=True), out.size,
                                             count, stop))
        if raised:
            raise raised[0]
        result = Generated(int(t) for t in out[: count[0]])
        result.stop_reason = string(stop[0])
        return result
