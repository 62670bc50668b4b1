"""dstrain: DeepSpeed-class training without a Python runtime, from Python.

A thin cffi layer over libdstrain's C ABI (``dstrain/dstrain.h``): all logic
lives in the library. Importing the package loads the library (see
:mod:`dstrain._lib` for where it looks) and checks its ABI version.

    >>> import dstrain
    >>> with dstrain.Engine(config=ds_config, model=model_spec) as engine:
    ...     loss = engine.train_batch(tokens, targets)
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

from ._cdef import DST_VERSION_MAJOR, DST_VERSION_MINOR, DST_VERSION_PATCH
from . import _lib
from ._lib import library_path
from ._version import __version__
from .dataset import Dataset, Split
from .generation import Generated, Generator
from .tokenizer import Tokenizer
from .engine import (
    Engine,
    EngineInfo,
    LossType,
    ModelType,
    ParamInfo,
    estimate_memory,
    export_checkpoint_hf,
    export_checkpoint_weights,
    inspect_checkpoint,
)
from .errors import (
    CheckpointError,
    CommError,
    ConfigError,
    DstrainError,
    DstrainIOError,
    InternalError,
    AbortedError,
    InvalidArgumentError,
    LibraryVersionError,
    NotSupportedError,
    NumericError,
    OutOfMemoryError,
    StateError,
    Status,
)

__all__ = [
    "__version__",
    "version",
    "version_number",
    "build_info",
    "io_probe",
    "comm_bench",
    "estimate_memory",
    "inspect_checkpoint",
    "export_checkpoint_hf",
    "export_checkpoint_weights",
    "library_path",
    "Engine",
    "EngineInfo",
    "ParamInfo",
    "ModelType",
    "LossType",
    "Dataset",
    "Generator",
    "Generated",
    "Tokenizer",
    "Split",
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
    "DST_VERSION_MAJOR",
    "DST_VERSION_MINOR",
    "DST_VERSION_PATCH",
]


def version() -> str:
    """The loaded library's version string, e.g. ``"0.2.0"``."""
    return _lib.string(_lib.lib.dst_version())


def version_number() -> int:
    """The loaded library's ``major * 10000 + minor * 100 + patch``."""
    return int(_lib.lib.dst_version_number())


def io_probe(directory: str, file_bytes: int = 0) -> Dict[str, Any]:
    """Sequential write and read bandwidth of the file system under
    `directory` through the NVMe offload tier's own I/O path, per aio block
    size and queue depth, with the best and the ``aio`` settings to use
    (``dst_io_probe_json``; `file_bytes` 0: 128 MiB per setting)."""
    out = _lib.ffi.new("const char **")
    _lib.check(_lib.lib.dst_io_probe_json(str(directory).encode(), int(file_bytes), out))
    result: Dict[str, Any] = json.loads(_lib.string(out[0]))
    return result


def comm_bench(config: Optional[Union[str, Dict[str, Any]]] = None, **request: Any) -> Dict[str, Any]:
    """Bandwidth of the job's collectives by nccl-tests' definitions
    (``dst_comm_bench_json``): call it on every rank of a launch. `config` (a
    ds_config dict or JSON text; None: one dp group of all ranks) gives the
    layout; `request` keys: group ("dp", "tp", "pp"), ops ("all" or a list of
    allreduce, allgather, reduce_scatter, broadcast, reduce, sendrecv),
    min_bytes, max_bytes, factor, iters, warmup. Returns {group, ranks,
    backend, rows: [{op, bytes, iters, time_us, algbw_GBps, busbw_GBps,
    errors}]}, the same on every rank."""
    config_text = json.dumps(config) if isinstance(config, dict) else config
    out = _lib.ffi.new("const char **")
    _lib.check(
        _lib.lib.dst_comm_bench_json(
            config_text.encode() if config_text else _lib.ffi.NULL,
            json.dumps(request).encode(),
            out,
        )
    )
    result: Dict[str, Any] = json.loads(_lib.string(out[0]))
    return result


def build_info() -> Dict[str, Any]:
    """How the library was built: version, compiler, build type, BLAS and its
    threads, CPU features, CUDA/NCCL, devices (``dst_build_info_json``)."""
    out = _lib.ffi.new("const char **")
    _lib.check(_lib.lib.dst_build_info_json(out))
    result: Dict[str, Any] = json.loads(_lib.string(out[0]))
    return result
