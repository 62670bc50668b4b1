"""A small, strict reader/writer of the safetensors format with numpy.

The `safetensors` pip package is not available here; this module is what the
tests use to exchange weights, gradients and batches with the engine. Layout:
8-byte little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}),
then the raw little-endian tensor bytes; offsets are relative to the data start.
"""

import json
import os
import struct
from collections import OrderedDict

import numpy as np

_NP_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
# bfloat16 has no numpy dtype: it is carried as uint16 bits and widened on load.
_BF16 = "BF16"


class SafetensorsError(ValueError):
    pass


def _dtype_size(name):
    if name == _BF16:
        return 2
    return _NP_DTYPES[name].itemsize


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start offset)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            raise SafetensorsError(f"{path}: header length {n} exceeds file size {size}")
        text = f.read(n)
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not valid JSON: {e}") from e
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise SafetensorsError(f"{path}: __metadata__ is not a str->str map")
    data_size = size - 8 - n
    spans = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"{path}: tensor {name!r}: malformed entry {entry!r}")
        dt = entry["dtype"]
        if dt != _BF16 and dt not in _NP_DTYPES:
            raise SafetensorsError(f"{path}: tensor {name!r}: unknown dtype {dt!r}")
        shape = entry["shape"]
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise SafetensorsError(f"{path}: tensor {name!r}: bad shape {shape!r}")
        offs = entry["data_offsets"]
        if (
            not isinstance(offs, list)
            or len(offs) != 2
            or not all(isinstance(o, int) and o >= 0 for o in offs)
            or offs[0] > offs[1]
            or offs[1] > data_size
        ):
            raise SafetensorsError(f"{path}: tensor {name!r}: bad data_offsets {offs!r}")
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if numel * _dtype_size(dt) != offs[1] - offs[0]:
            raise SafetensorsError(
                f"{path}: tensor {name!r}: shape {shape} of {dt} does not match "
                f"{offs[1] - offs[0]} bytes"
            )
        spans.append((offs[0], offs[1], name))
    cursor = 0
    for begin, end, name in sorted(spans):
        if begin != cursor:
            raise SafetensorsError(f"{path}: tensor {name!r}: offsets not contiguous")
        cursor = end
    if cursor != data_size:
        raise SafetensorsError(f"{path}: tensors cover {cursor} of {data_size} data bytes")
    return header, metadata, 8 + n


def _no_duplicates(pairs):
    d = OrderedDict()
    for k, v in pairs:
        if k in d:
            raise SafetensorsError(f"duplicate key {k!r} in safetensors header")
        d[k] = v
    return d


def load_numpy(path):
    """Returns (OrderedDict name -> numpy array in header order, metadata).

    BF16 tensors are widened to float32.
    """
    header, metadata, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    out = OrderedDict()
    for name, entry in header.items():
        b, e = entry["data_offsets"]
        shape = tuple(entry["shape"])
        if entry["dtype"] == _BF16:
            bits = np.frombuffer(data[b:e], dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32).reshape(shape)
        else:
            arr = np.frombuffer(data[b:e], dtype=_NP_DTYPES[entry["dtype"]]).reshape(shape)
        out[name] = arr.copy()
    return out, metadata


def load_torch(path):
    """Returns OrderedDict name -> torch tensor (header order)."""
    import torch

    arrays, _ = load_numpy(path)
    return OrderedDict((k, torch.from_numpy(np.asarray(v, order="C"))) for k, v in arrays.items())


def save(path, tensors, metadata=None):
    """Writes an ordered mapping name -> numpy array or torch tensor."""
    header = OrderedDict()
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    rev = {v: k for k, v in _NP_DTYPES.items()}
    for name, value in tensors.items():
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        arr = np.asarray(value, order="C")  # keeps 0-d scalars 0-d
        key = rev.get(arr.dtype.newbyteorder("<"))
        if key is None:
            raise SafetensorsError(f"tensor {name!r}: unsupported dtype {arr.dtype}")
        raw = arr.astype(_NP_DTYPES[key], copy=False).tobytes()
        header[name] = {
            "dtype": key,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
