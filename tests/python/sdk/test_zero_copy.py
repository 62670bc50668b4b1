"""Batches are passed to the library without a copy when they are already
C-contiguous int32/float32, and are converted (and still work) otherwise.

A spy stands in for the cffi library object of dstrain.engine: it records the
pointers the engine puts into dst_batch_t and forwards the call to the real
library, so the test sees exactly what the C side receives."""

from __future__ import annotations

import numpy as np
import pytest

from sdk_support import TINY_GPT, tiny_config


class LibSpy:
    def __init__(self, real, ffi):
        self._real, self._ffi = real, ffi
        self.seen = []

    def __getattr__(self, name):
        fn = getattr(self._real, name)
        if not name.endswith(("_train_batch", "_eval_batch", "_forward_backward")):
            return fn

        def spy(engine, batch, loss):
            address = lambda p: int(self._ffi.cast("uintptr_t", p))  # noqa: E731
            self.seen.append({f: address(getattr(batch, f))
                              for f in ("tokens", "targets", "inputs", "labels")})
            return fn(engine, batch, loss)

        return spy


@pytest.fixture
def spy(dst, monkeypatch):
    from dstrain import _lib, engine

    s = LibSpy(_lib.lib, _lib.ffi)
    monkeypatch.setattr(engine, "lib", s)
    return s


def test_contiguous_int32_is_not_copied(dst, spy):
    tokens = np.random.default_rng(0).integers(0, 256, (4, 16)).astype(np.int32)
    targets = np.roll(tokens, -1, axis=1)
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        loss = engine.train_batch(tokens, targets)
        assert np.isfinite(loss)
    assert spy.seen[-1]["tokens"] == tokens.ctypes.data
    assert spy.seen[-1]["targets"] == targets.ctypes.data


def test_readonly_strided_array_is_converted(dst, spy):
    base = np.random.default_rng(1).integers(0, 256, (4, 32)).astype(np.int32)
    tokens = base[:, ::2]  # non-contiguous view
    tokens.flags.writeable = False
    targets = np.ascontiguousarray(base[:, 1::2])
    targets.flags.writeable = False  # read-only but contiguous: still zero-copy
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        loss = engine.train_batch(tokens, targets)
        expected_pointer_free = engine.eval_batch(np.ascontiguousarray(tokens), targets)
    assert np.isfinite(loss) and np.isfinite(expected_pointer_free)
    assert spy.seen[0]["tokens"] != tokens.ctypes.data  # converted copy
    assert spy.seen[0]["targets"] == targets.ctypes.data  # read-only, contiguous: no copy


def test_float32_inputs_not_copied_float64_converted(dst, spy):
    model = {"type": "sequential", "input_dim": 3, "loss": "mse",
             "layers": [{"type": "linear", "out_features": 2}]}
    x = np.ones((4, 3), np.float32)
    y = np.zeros((4, 2), np.float32)
    with dst.Engine(config=tiny_config(), model=model) as engine:
        a = engine.eval_batch(x, y)
        b = engine.eval_batch(x.astype(np.float64), y.astype(np.float64))
    assert a == b
    assert spy.seen[0]["inputs"] == x.ctypes.data and spy.seen[0]["labels"] == y.ctypes.data
    assert spy.seen[1]["inputs"] != x.ctypes.data
    assert spy.seen[0]["tokens"] == 0  # NULL for the fields this model does not use


def test_buffer_helpers_share_memory(dst):
    import array

    from dstrain import _buffers, _lib

    address = lambda p: int(_lib.ffi.cast("uintptr_t", p))  # noqa: E731
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    buf = _buffers.as_int32(a, "tokens")
    assert not buf.copied and address(buf.ptr) == a.ctypes.data and buf.shape == (3, 4)
    raw = array.array("i", range(8))
    buf = _buffers.as_int32(raw, "tokens")
    assert not buf.copied and address(buf.ptr) == raw.buffer_info()[0] and buf.numel == 8
    buf = _buffers.as_int32(a.T, "tokens")
    assert buf.copied and buf.owner.flags.c_contiguous
    f = np.ones(5, np.float32)
    buf = _buffers.as_float32(memoryview(f), "inputs")
    assert not buf.copied and address(buf.ptr) == f.ctypes.data
    with pytest.raises(TypeError, match="real numbers"):
        _buffers.as_float32(np.array(["a"]), "inputs")
