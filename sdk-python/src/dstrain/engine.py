"""The training engine: one ``dst_engine_t`` behind a Python object."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import pathlib
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
from numpy.typing import NDArray

from . import _buffers
from ._lib import check, encode, ffi, lib, string
from .errors import StateError

__all__ = [
    "Engine",
    "EngineInfo",
    "ParamInfo",
    "ModelType",
    "LossType",
    "JsonSource",
    "estimate_memory",
]

#: A ds_config or model spec: a dict (JSON-encoded), a path to a JSON file
#: (str or os.PathLike), or JSON text (a str starting with "{").
JsonSource = Union[Mapping[str, Any], str, "os.PathLike[str]"]


class ModelType(enum.IntEnum):
    """Mirror of ``dst_model_type_t``."""

    GPT = 1
    SEQUENTIAL = 2


class LossType(enum.IntEnum):
    """Mirror of ``dst_loss_type_t``."""

    CROSS_ENTROPY = 1
    MSE = 2


@dataclasses.dataclass(frozen=True)
class EngineInfo:
    """What a caller needs to shape its batches (``dst_engine_get_info``).

    The fields are those of ``dst_engine_info_t`` (without ``struct_size``).
    """

    model_type: ModelType
    loss_type: LossType
    num_parameters: int  #: trainable scalars (tied weights counted once)
    train_batch_size: int  #: global samples per optimizer step
    micro_batch_size: int  #: samples per micro-step per rank
    grad_accum_steps: int  #: micro-steps per optimizer step
    dp_size: int  #: data-parallel ranks
    rank: int  #: this process's global rank
    world_size: int  #: processes in the job
    seq_len: int  #: GPT: maximum context (n_ctx); sequential: 0
    vocab_size: int  #: GPT: vocabulary; sequential: 0
    input_dim: int  #: sequential: features per sample; GPT: 0
    output_dim: int  #: sequential: outputs (classes) per sample; GPT: vocab
    dp_rank: int  #: this rank's data-parallel index (its slice of each global batch)
    pp_size: int  #: pipeline stages
    pp_rank: int  #: this rank's pipeline stage
    tp_size: int  #: tensor-parallel ranks
    tp_rank: int  #: this rank's tensor-parallel index

    @property
    def local_batch_size(self) -> int:
        """Samples one :meth:`Engine.train_batch` call on this rank takes:
        ``micro_batch_size * grad_accum_steps``."""
        return self.micro_batch_size * self.grad_accum_steps


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    """A named parameter tensor (PyTorch names and layouts)."""

    name: str
    shape: Tuple[int, ...]
    numel: int


def _json_or_path(value: Any, what: str) -> Tuple[Optional[str], Optional[str]]:
    """(json_text, path) for a config/model argument; exactly one is set."""
    if value is None:
        return None, None  # the library says what is missing
    if isinstance(value, Mapping):
        return json.dumps(value), None
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8")
    if isinstance(value, str):
        if not os.path.isfile(value) and value.lstrip().startswith("{"):
            return value, None
        return None, value  # a path; a missing file is reported by the library
    if isinstance(value, os.PathLike):
        return None, os.fspath(value)
    raise TypeError(
        f"dstrain: {what} must be a dict, a path to a JSON file or a JSON string, "
        f"got {type(value).__name__}"
    )


def _options(config: Any, model: Any, total_steps: int) -> Tuple[Any, List[Any]]:
    """A filled dst_engine_options_t and the strings it points to."""
    config_json, config_path = _json_or_path(config, "config")
    model_json, model_path = _json_or_path(model, "model")
    if isinstance(total_steps, bool) or not isinstance(total_steps, int):
        raise TypeError(f"dstrain: total_steps must be an int, got {total_steps!r}")
    options: Any = ffi.new("dst_engine_options_t *")
    lib.dst_engine_options_default(options)
    keep = [encode(config_json), encode(config_path), encode(model_json), encode(model_path)]
    options.config_json, options.config_path, options.model_json, options.model_path = keep
    options.total_steps = total_steps
    return options, keep


def estimate_memory(
    config: JsonSource, model: JsonSource, world_size: int = 1, total_steps: int = 0
) -> Dict[str, Any]:
    """Per-rank model-state memory for ZeRO stages 0-3 at `world_size` ranks,
    without allocating anything (``dst_estimate_memory_json``): a dict with
    ``num_parameters``, ``dp_size``, ``configured_stage`` and ``stages``
    (``parameters_bytes``, ``gradients_bytes``, ``optimizer_state_bytes``,
    ``total_bytes``, ``supported`` per stage)."""
    options, keep = _options(config, model, total_steps)
    out = ffi.new("const char **")
    check(lib.dst_estimate_memory_json(options, world_size, out))
    del keep
    result: Dict[str, Any] = json.loads(string(out[0]))
    return result


def inspect_checkpoint(
    directory: Union[str, "os.PathLike[str]"], tag: Optional[str] = None
) -> Dict[str, Any]:
    """What a checkpoint holds (``dst_checkpoint_inspect_json``): step,
    ``topology`` it was saved from, ``precision``, ``optimizer``, ``files``
    (each verified against its checksum), ``tensors``, ``shards`` and
    ``valid``. ``tag`` None: the tag named by ``directory/latest``."""
    c_dir, c_tag = encode(os.fspath(directory)), encode(tag)
    out = ffi.new("const char **")
    check(lib.dst_checkpoint_inspect_json(c_dir, c_tag, out))
    result: Dict[str, Any] = json.loads(string(out[0]))
    return result


def export_checkpoint_weights(
    directory: Union[str, "os.PathLike[str]"],
    out: Union[str, "os.PathLike[str]"],
    tag: Optional[str] = None,
) -> None:
    """Writes a checkpoint's consolidated fp32 weights to one safetensors
    file (``dst_checkpoint_export_weights``), whatever layout saved it."""
    c_dir, c_tag, c_out = encode(os.fspath(directory)), encode(tag), encode(os.fspath(out))
    check(lib.dst_checkpoint_export_weights(c_dir, c_tag, c_out))


def export_checkpoint_hf(
    directory: Union[str, "os.PathLike[str]"],
    out: Union[str, "os.PathLike[str]"],
    tag: Optional[str] = None,
    dtype: str = "fp32",
    max_shard_size: str = "5GB",
) -> None:
    """Writes a checkpoint as a Hugging Face model directory ``out`` (new or
    empty): config.json, generation_config.json and the weights in the
    family's Hugging Face names and layouts, ``dtype`` "fp32", "bf16" or
    "fp16", sharded beyond ``max_shard_size`` (``dst_checkpoint_export_hf``),
    whatever layout saved it; ``transformers``' ``from_pretrained`` loads it."""
    check(lib.dst_checkpoint_export_hf(encode(os.fspath(directory)), encode(tag),
                                       encode(os.fspath(out)), encode(dtype),
                                       encode(max_shard_size)))


class Engine:
    """A training engine configured by a DeepSpeed-style ds_config.

    Args:
        config: the ds_config -- a dict, a path to ``ds_config.json`` or JSON
            text.
        model: the model spec (``{"type": "gpt", ...}``, ``{"type": "llama",
            ...}``, ``{"type": "sequential", ...}``, or ``{"type": "hf", "path":
            DIR}`` for a Hugging Face model directory and its weights) -- a
            dict, a path (a directory: a Hugging Face model) or JSON text.
        total_steps: the planned number of optimizer steps; resolves
            ``"auto"`` in ``scheduler.params.total_num_steps`` (0 = unknown).

    Raises:
        ConfigError: the config or model spec is malformed (the message names
            the JSON path and, for an unknown key, the nearest known one).
        NotSupportedError: a recognised feature that is not built yet.
        DstrainIOError: a path could not be read.

    Use it as a context manager, or call :meth:`close`; an engine that is
    garbage-collected frees its memory too. Calls on one engine are
    serialised by a lock (the C ABI forbids concurrent calls on one handle).

    Example::

        with dstrain.Engine(config={"train_batch_size": 8}, model=spec) as engine:
            loss = engine.train_batch(tokens, targets)
    """

    def __init__(self, config: JsonSource, model: JsonSource, total_steps: int = 0) -> None:
        self._lock = threading.Lock()
        # Taken by close and abort around freeing the handle; abort does not
        # take _lock, which the call it interrupts holds.
        self._handle_lock = threading.Lock()
        self._handle: Any = None
        self._params: Optional[List[ParamInfo]] = None
        self._shapes: Dict[str, Tuple[int, ...]] = {}
        options, keep = _options(config, model, total_steps)
        out = ffi.new("dst_engine_t **")
        check(lib.dst_engine_create(out, options))
        del keep
        self._handle = ffi.gc(out[0], lib.dst_engine_destroy)
        self._info = self._read_info()

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Frees the engine (idempotent). Later calls raise :class:`StateError`."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before anything was allocated
            return
        with lock, self._handle_lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                ffi.release(handle)  # runs dst_engine_destroy now, exactly once

    def abort(self) -> None:
        """Frees the engine without waiting for the other ranks
        (``dst_engine_abort``, like ``ncclCommAbort``): for a rank that has
        seen a peer fail. :meth:`close` says goodbye to the other ranks and
        may wait for them (up to ``comm_timeout_seconds``); this closes the
        connections at once. Idempotent, and a no-op after :meth:`close`;
        later calls raise :class:`StateError`.

        Callable from any thread while another thread's call runs (that
        call raises :class:`AbortedError` within about a second, even when
        it waits on a peer that will never answer); returns once that call
        has returned. A Python signal handler runs on the main thread only
        between bytecodes, so to stop training on SIGINT/SIGTERM, train in
        a worker thread and let the handler call this::

            worker = threading.Thread(target=train, args=(engine,))
            worker.start()
            signal.signal(signal.SIGTERM, lambda *_: engine.abort())
            while worker.is_alive():
                worker.join(0.2)  # the handler runs between these waits
        """
        handle_lock = getattr(self, "_handle_lock", None)
        if handle_lock is None:  # __init__ failed before anything was allocated
            return
        with handle_lock:
            handle = self._handle
            if handle is not None:
                # The library keeps an aborted handle's address dead, so the
                # destroy that runs when the cdata is collected does nothing.
                lib.dst_engine_abort(handle)
                self._handle = None

    @property
    def closed(self) -> bool:
        """True after :meth:`close` or :meth:`abort`."""
        return self._handle is None

    def __enter__(self) -> "Engine":
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
            return "<dstrain.Engine (closed)>"
        i = self._info
        return (
            f"<dstrain.Engine {i.model_type.name.lower()} "
            f"{i.num_parameters} params, step {self.step}>"
        )

    def _h(self) -> Any:
        handle = self._handle
        if handle is None:
            raise StateError("dstrain: this Engine is closed; create a new Engine")
        return handle

    # ------------------------------------------------------------ shape

    def _read_info(self) -> EngineInfo:
        c: Any = ffi.new("dst_engine_info_t *")
        c.struct_size = ffi.sizeof("dst_engine_info_t")
        check(lib.dst_engine_get_info(self._h(), c))
        values: Dict[str, Any] = {
            f.name: int(getattr(c, f.name)) for f in dataclasses.fields(EngineInfo)
        }
        values["model_type"] = ModelType(values["model_type"])
        values["loss_type"] = LossType(values["loss_type"])
        return EngineInfo(**values)

    @property
    def info(self) -> EngineInfo:
        """Model type, loss, batch sizes, ranks and dimensions."""
        self._h()
        return self._info

    # ------------------------------------------------------------ batches

    def _batch(
        self,
        x: Any,
        y: Any,
        tokens: Any,
        targets: Any,
        inputs: Any,
        labels: Any,
        n_samples: Optional[int],
        seq_len: Optional[int],
    ) -> Tuple[Any, List[Any]]:
        """A dst_batch_t for the arrays, and the objects that must stay alive."""
        info = self._info
        gpt = info.model_type == ModelType.GPT

        def take(positional: Any, keyword: Any, name: str) -> Any:
            if positional is not None and keyword is not None:
                raise TypeError(f"dstrain: {name} given both positionally and as {name}=")
            return keyword if positional is None else positional

        if gpt:
            tokens = take(x, tokens, "tokens")
            targets = take(y, targets, "targets")
            if inputs is not None or labels is not None:
                raise TypeError(
                    "dstrain: this engine trains a GPT: pass tokens and targets, "
                    "not inputs/labels"
                )
        else:
            inputs = take(x, inputs, "inputs")
            if info.loss_type == LossType.MSE:
                labels = take(y, labels, "labels")
            else:
                targets = take(y, targets, "targets")
            if tokens is not None:
                raise TypeError(
                    "dstrain: this engine trains a sequential model: pass inputs and "
                    "labels (MSE) or targets (cross-entropy), not tokens"
                )

        batch: Any = ffi.new("dst_batch_t *")
        lib.dst_batch_default(batch)
        keep: List[Any] = [batch]
        buffers: Dict[str, _buffers.CBuffer] = {}
        for name, value, convert in (
            ("tokens", tokens, _buffers.as_int32),
            ("targets", targets, _buffers.as_int32),
            ("inputs", inputs, _buffers.as_float32),
            ("labels", labels, _buffers.as_float32),
        ):
            if value is None:
                continue  # the library names the missing buffer
            buf = convert(value, name)
            buffers[name] = buf
            keep.append(buf)
            setattr(batch, name, buf.ptr)
            setattr(batch, name + "_count", buf.numel)

        # Fill n_samples / seq_len from the leading array's shape; sizes are
        # validated by the library.
        lead = buffers.get("tokens" if gpt else "inputs")
        if gpt:
            if seq_len is None:
                if lead is not None and len(lead.shape) >= 2:
                    seq_len = int(lead.shape[1])
                else:
                    seq_len = info.seq_len
            if n_samples is None:
                if lead is not None and len(lead.shape) >= 2:
                    n_samples = int(lead.shape[0])
                elif lead is not None and seq_len > 0:
                    n_samples = math.ceil(lead.numel / seq_len)
                else:
                    n_samples = info.local_batch_size
        else:
            seq_len = 0 if seq_len is None else seq_len
            if n_samples is None:
                if lead is not None and len(lead.shape) >= 2:
                    n_samples = int(lead.shape[0])
                elif lead is not None and info.input_dim > 0:
                    n_samples = math.ceil(lead.numel / info.input_dim)
                else:
                    n_samples = info.local_batch_size
        if n_samples < 0 or seq_len < 0:
            raise ValueError(f"dstrain: n_samples={n_samples} and seq_len={seq_len} must be >= 0")
        batch.n_samples = n_samples
        batch.seq_len = seq_len
        return batch, keep

    def _run_batch(self, fn: Any, args: Tuple[Any, ...]) -> float:
        self._h()  # a closed engine fails before any conversion
        batch, keep = self._batch(*args)
        loss = ffi.new("float *")
        with self._lock:
            check(fn(self._h(), batch, loss))
        del keep
        return float(loss[0])

    def train_batch(
        self,
        x: Any = None,
        y: Any = None,
        /,
        *,
        tokens: Any = None,
        targets: Any = None,
        inputs: Any = None,
        labels: Any = None,
        n_samples: Optional[int] = None,
        seq_len: Optional[int] = None,
    ) -> float:
        """One optimizer step over ``info.local_batch_size`` samples; returns
        the mean loss over the micro-batches.

        GPT: ``train_batch(tokens, targets)`` with int32 arrays
        ``[n_samples, seq_len]`` (targets of -1 are ignored). Sequential:
        ``train_batch(inputs, labels)`` (MSE, float32 ``[n, input_dim]`` and
        ``[n, output_dim]``) or ``train_batch(inputs, targets)``
        (cross-entropy, int32 class ids ``[n]``); the keywords
        ``tokens=/targets=/inputs=/labels=`` say the same.

        Arrays may be numpy arrays or any buffer-protocol object. A
        C-contiguous array of the right dtype is passed without a copy;
        others are converted. ``n_samples`` and ``seq_len`` are read from
        the leading array's shape (pass them for flat 1-D buffers); the
        library checks every size and names a mismatch.

        Raises:
            InvalidArgumentError: a buffer of the wrong size or an id out of range.
            NumericError: the loss or gradients were not finite (nothing changed).
        """
        return self._run_batch(
            lib.dst_engine_train_batch,
            (x, y, tokens, targets, inputs, labels, n_samples, seq_len),
        )

    def eval_batch(
        self,
        x: Any = None,
        y: Any = None,
        /,
        *,
        tokens: Any = None,
        targets: Any = None,
        inputs: Any = None,
        labels: Any = None,
        n_samples: Optional[int] = None,
        seq_len: Optional[int] = None,
    ) -> float:
        """The mean loss of a forward pass (no state changes). Arguments as
        :meth:`train_batch`; any multiple of ``micro_batch_size`` samples."""
        return self._run_batch(
            lib.dst_engine_eval_batch,
            (x, y, tokens, targets, inputs, labels, n_samples, seq_len),
        )

    def forward_backward(
        self,
        x: Any = None,
        y: Any = None,
        /,
        *,
        tokens: Any = None,
        targets: Any = None,
        inputs: Any = None,
        labels: Any = None,
        n_samples: Optional[int] = None,
        seq_len: Optional[int] = None,
    ) -> float:
        """Forward and backward without an optimizer step; returns the loss and
        leaves the gradients (mean over micro-batches, before clipping)
        readable with :meth:`get_grad`. Does not advance :attr:`step`."""
        return self._run_batch(
            lib.dst_engine_forward_backward,
            (x, y, tokens, targets, inputs, labels, n_samples, seq_len),
        )

    # ------------------------------------------------------------ progress

    def _step_unlocked(self) -> int:
        out = ffi.new("int64_t *")
        check(lib.dst_engine_step_count(self._h(), out))
        return int(out[0])

    @property
    def step(self) -> int:
        """Optimizer steps taken so far."""
        with self._lock:
            return self._step_unlocked()

    @property
    def learning_rate(self) -> float:
        """The learning rate the next optimizer step will use."""
        out = ffi.new("double *")
        with self._lock:
            check(lib.dst_engine_learning_rate(self._h(), out))
        return float(out[0])

    @property
    def loss_scale(self) -> float:
        """fp16: the current loss scale (1.0 under fp32 and bf16)."""
        out = ffi.new("double *")
        with self._lock:
            check(lib.dst_engine_loss_scale(self._h(), out, ffi.NULL))
        return float(out[0])

    @property
    def skipped_steps(self) -> int:
        """fp16: optimizer steps skipped so far because gradients overflowed."""
        out = ffi.new("int64_t *")
        with self._lock:
            check(lib.dst_engine_loss_scale(self._h(), ffi.NULL, out))
        return int(out[0])

    # ------------------------------------------------------------ parameters

    def parameters(self) -> List[ParamInfo]:
        """The named parameter tensors in the engine's order (a tied weight
        is listed once)."""
        with self._lock:
            handle = self._h()
            if self._params is None:
                count = ffi.new("size_t *")
                check(lib.dst_engine_param_count(handle, count))
                params = []
                c: Any = ffi.new("dst_tensor_info_t *")
                for i in range(int(count[0])):
                    c.struct_size = ffi.sizeof("dst_tensor_info_t")
                    check(lib.dst_engine_param_info(handle, i, c))
                    shape = tuple(int(c.shape[d]) for d in range(int(c.ndim)))
                    params.append(ParamInfo(string(c.name), shape, int(c.numel)))
                self._params = params
                self._shapes = {p.name: p.shape for p in params}
            return list(self._params)

    def _shape_of(self, name: str) -> Optional[Tuple[int, ...]]:
        if self._params is None:
            self.parameters()
        return self._shapes.get(name)

    def _copy_out(
        self, fn: Any, name: str, out: Optional[NDArray[np.float32]]
    ) -> NDArray[np.float32]:
        shape = self._shape_of(name)
        encoded = encode(name)
        if shape is None:
            # Unknown name: let the library say so in its own words.
            dummy = ffi.new("float[1]")
            with self._lock:
                check(fn(self._h(), encoded, dummy, 1))
            raise AssertionError("unreachable: the library accepted an unknown parameter")
        arr, ptr = _buffers.writable_float32(out, shape, name)
        with self._lock:
            check(fn(self._h(), encoded, ptr, arr.size))
        return arr

    def get_param(
        self, name: str, out: Optional[NDArray[np.float32]] = None
    ) -> NDArray[np.float32]:
        """A copy of parameter `name` as a float32 array of its shape (or
        written into `out`, a C-contiguous float32 array of its size)."""
        return self._copy_out(lib.dst_engine_get_param, name, out)

    def get_grad(
        self, name: str, out: Optional[NDArray[np.float32]] = None
    ) -> NDArray[np.float32]:
        """The gradient of parameter `name` after :meth:`forward_backward`
        (or the last :meth:`train_batch`), as :meth:`get_param`."""
        return self._copy_out(lib.dst_engine_get_grad, name, out)

    def set_param(self, name: str, value: Any) -> None:
        """Overwrites parameter `name` with `value` (converted to float32).

        A multi-dimensional `value` must have the parameter's shape (nn.Linear
        weights are ``[out, in]``); a flat one must have its element count.
        """
        shape = self._shape_of(name)
        buf = _buffers.as_float32(value, name)
        if shape is not None and len(buf.shape) > 1 and tuple(buf.shape) != shape:
            raise ValueError(
                f"dstrain: set_param: \"{name}\" has shape {list(shape)} but the array has "
                f"shape {list(buf.shape)}"
            )
        encoded = encode(name)
        with self._lock:
            check(lib.dst_engine_set_param(self._h(), encoded, buf.ptr, buf.numel))

    def state_dict(self) -> Dict[str, NDArray[np.float32]]:
        """Every parameter as ``{name: float32 array}`` (PyTorch names)."""
        return {p.name: self.get_param(p.name) for p in self.parameters()}

    # ------------------------------------------------------------ checkpoints

    def save_checkpoint(
        self,
        save_dir: Union[str, "os.PathLike[str]"],
        tag: Optional[str] = None,
        client_state: Any = None,
    ) -> pathlib.Path:
        """Writes ``save_dir/tag/`` (weights, optimizer state, schedule, config)
        and ``save_dir/latest``; returns the checkpoint directory.

        Args:
            save_dir: the checkpoint root (created if needed).
            tag: the directory name; default ``global_step<step>``.
            client_state: any JSON-serialisable object, returned by
                :meth:`load_checkpoint` (DeepSpeed's ``client_state``).
        """
        directory = os.fspath(save_dir)
        state = None if client_state is None else json.dumps(client_state)
        c_dir, c_tag, c_state = encode(directory), encode(tag), encode(state)
        with self._lock:
            handle = self._h()
            check(lib.dst_engine_save_checkpoint(handle, c_dir, c_tag, c_state))
            name = tag if tag is not None else f"global_step{self._step_unlocked()}"
        return pathlib.Path(directory) / name

    def load_checkpoint(
        self, load_dir: Union[str, "os.PathLike[str]"], tag: Optional[str] = None
    ) -> Any:
        """Restores weights, optimizer state, step and schedule from
        ``load_dir/tag`` (default: the tag in ``load_dir/latest``); returns
        the saved ``client_state`` (None if none). Everything is validated
        before the engine changes.

        Raises:
            CheckpointError: missing, corrupt, or not matching this model.
        """
        c_dir, c_tag = encode(os.fspath(load_dir)), encode(tag)
        out = ffi.new("const char **")
        with self._lock:
            check(lib.dst_engine_load_checkpoint(self._h(), c_dir, c_tag, out))
            text = string(out[0])
        return json.loads(text) if text else None

    def load_weights(
        self, load_dir: Union[str, "os.PathLike[str]"], tag: Optional[str] = None
    ) -> None:
        """Loads only the checkpoint's weights (checksums verified, names and
        shapes matching): no optimizer state, step or model-spec check. How to
        start a model that computes differently (another ``n_head``) from a
        checkpoint's weights, which :meth:`load_checkpoint` refuses.

        Raises:
            CheckpointError: missing, corrupt, or tensors not matching.
        """
        c_dir, c_tag = encode(os.fspath(load_dir)), encode(tag)
        with self._lock:
            check(lib.dst_engine_load_weights(self._h(), c_dir, c_tag))

    # ------------------------------------------------------------ metrics

    def metrics(self) -> Dict[str, Any]:
        """A snapshot: step, loss, lr, grad_norm, tokens/s, FLOPs, seconds per
        phase, bytes per memory category (see docs/reference/metrics.md)."""
        out = ffi.new("const char **")
        with self._lock:
            check(lib.dst_engine_metrics_json(self._h(), out))
            text = string(out[0])
        result: Dict[str, Any] = json.loads(text)
        return result

    def memory_status(self) -> Dict[str, Any]:
        """This rank's memory now (DeepSpeed's ``memory_status`` /
        ``see_memory_usage``): bytes and peak bytes per category
        (``categories``), their ``total``, the process's resident set now
        and at its peak (``process``), the machine's total and available
        memory (``system``)."""
        out = ffi.new("const char **")
        with self._lock:
            check(lib.dst_engine_memory_status(self._h(), out))
            text = string(out[0])
        result: Dict[str, Any] = json.loads(text)
        return result

    def monitor_url(self) -> str:
        """This rank's metrics server and dashboard ("http://127.0.0.1:9400/"),
        or "" when dstrain.monitor.http is off."""
        out = ffi.new("const char **")
        with self._lock:
            check(lib.dst_engine_monitor_url(self._h(), out))
            return string(out[0])

    def config(self) -> Dict[str, Any]:
        """The resolved ds_config ("auto" filled in)."""
        out = ffi.new("const char **")
        with self._lock:
            check(lib.dst_engine_config_json(self._h(), out))
            text = string(out[0])
        result: Dict[str, Any] = json.loads(text)
        return result
