"""Errors arrive as the right DstrainError subclass, with the library's own
message (dst_last_error) and .status; misuse caught in Python (a closed
engine) raises from the same hierarchy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sdk_support import TINY_GPT, tiny_config


def last_error(dst) -> str:
    from dstrain import _lib

    return _lib.string(_lib.lib.dst_last_error())


def test_hierarchy(dst):
    assert issubclass(dst.DstrainIOError, dst.DstrainError)
    assert issubclass(dst.DstrainIOError, OSError)
    assert issubclass(dst.OutOfMemoryError, MemoryError)
    for cls in (dst.InvalidArgumentError, dst.ConfigError, dst.NotSupportedError,
                dst.CheckpointError, dst.StateError, dst.CommError, dst.NumericError,
                dst.InternalError):
        assert issubclass(cls, dst.DstrainError)
    error = dst.DstrainIOError("cannot read x")
    assert str(error) == "cannot read x" and error.status == dst.Status.IO
    assert error.errno is None
    unknown = dst.errors.error_for_status(99, "from the future")
    assert type(unknown) is dst.DstrainError and unknown.status == 99


def test_unknown_config_key_suggests_the_right_one(dst):
    config = tiny_config()
    config["optimiser"] = config.pop("optimizer")
    with pytest.raises(dst.ConfigError) as info:
        dst.Engine(config=config, model=TINY_GPT)
    error = info.value
    assert error.status == dst.Status.CONFIG
    assert 'unknown key "optimiser"' in str(error) and 'did you mean "optimizer"' in str(error)
    assert error.message == last_error(dst)  # the library's message, verbatim


def test_batch_identity_names_the_numbers(dst):
    with pytest.raises(dst.ConfigError, match=r"train_batch_size.*4"):
        dst.Engine(config=tiny_config(train_batch_size=5), model=TINY_GPT)


def test_bad_model_spec(dst):
    with pytest.raises(dst.ConfigError, match="not divisible by n_head"):
        dst.Engine(config=tiny_config(), model=dict(TINY_GPT, n_head=3))


def test_not_supported_feature(dst):
    with pytest.raises(dst.NotSupportedError) as info:
        dst.Engine(config=tiny_config(optimizer={"type": "Adam", "params": {"amsgrad": True}}),
                   model=TINY_GPT)
    assert info.value.status == dst.Status.NOT_SUPPORTED
    assert "not supported" in str(info.value)


def test_missing_file_is_an_os_error(dst, tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(OSError) as info:
        dst.Engine(config=missing, model=TINY_GPT)
    assert isinstance(info.value, dst.DstrainIOError)
    assert str(missing) in str(info.value)
    with pytest.raises(dst.DstrainIOError, match="nope.txt"):
        dst.Dataset.open_text(tmp_path / "nope.txt")


def test_wrong_buffer_size_is_the_librarys_message(dst):
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        tokens = np.zeros((3, 16), np.int32)  # 3 samples, the step needs 4
        with pytest.raises(dst.InvalidArgumentError) as info:
            engine.train_batch(tokens, tokens)
        assert info.value.message == last_error(dst)
        assert "4" in str(info.value) and "3" in str(info.value)
        # Sizes that disagree with n_samples x seq_len: the library names the count.
        with pytest.raises(dst.InvalidArgumentError, match="targets_count is 48"):
            engine.train_batch(np.zeros((4, 16), np.int32), np.zeros((4, 12), np.int32))
        with pytest.raises(dst.InvalidArgumentError, match=r"outside \[0, 256\)"):
            engine.train_batch(np.full((4, 16), 300, np.int32), np.zeros((4, 16), np.int32))
        with pytest.raises(dst.InvalidArgumentError, match="targets"):
            engine.train_batch(tokens=np.zeros((4, 16), np.int32))  # targets missing
        with pytest.raises(dst.InvalidArgumentError, match='no parameter named "nope"'):
            engine.get_param("nope")
        with pytest.raises(dst.InvalidArgumentError, match="has 4096 elements"):
            engine.set_param("transformer.wte.weight", np.zeros(10, np.float32))
        assert engine.step == 0  # nothing happened


def test_closed_engine_is_a_state_error(dst):
    engine = dst.Engine(config=tiny_config(), model=TINY_GPT)
    engine.close()
    engine.close()  # idempotent
    assert engine.closed and "closed" in repr(engine)
    tokens = np.zeros((4, 16), np.int32)
    for call in (lambda: engine.train_batch(tokens, tokens), lambda: engine.step,
                 lambda: engine.get_param("transformer.wte.weight"), engine.metrics,
                 lambda: engine.save_checkpoint("x"), lambda: engine.info):
        with pytest.raises(dst.StateError, match="closed"):
            call()
    with pytest.raises(dst.StateError):
        with engine:
            pass


def test_context_manager_closes_on_error(dst):
    with pytest.raises(RuntimeError):
        with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
            raise RuntimeError("boom")
    assert engine.closed


def test_del_is_safe(dst):
    engine = dst.Engine(config=tiny_config(), model=TINY_GPT)
    engine.__del__()
    engine.__del__()
    del engine
    broken = dst.Engine.__new__(dst.Engine)  # __init__ never ran
    broken.__del__()


def test_non_finite_loss_is_a_numeric_error(dst):
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        w = engine.get_param("transformer.wte.weight")
        bad = w.copy()
        bad[0, 0] = np.inf
        engine.set_param("transformer.wte.weight", bad)
        tokens = np.zeros((4, 16), np.int32)
        with pytest.raises(dst.NumericError) as info:
            engine.train_batch(tokens, tokens)
        assert info.value.status == dst.Status.NUMERIC
        assert engine.step == 0


def test_corrupt_checkpoint(dst, tmp_path):
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        path = engine.save_checkpoint(tmp_path / "ckpt", client_state={"a": 1})
        weights = path / "model.safetensors"
        data = bytearray(weights.read_bytes())
        data[-5] ^= 0xFF  # flip bits in the last tensor
        weights.write_bytes(bytes(data))
        with pytest.raises(dst.CheckpointError) as info:
            engine.load_checkpoint(tmp_path / "ckpt")
        assert info.value.status == dst.Status.CHECKPOINT
        assert "model.safetensors" in str(info.value)
        assert info.value.message == last_error(dst)
        with pytest.raises(dst.CheckpointError):
            engine.load_checkpoint(tmp_path / "ckpt", tag="global_step7")
        with pytest.raises(dst.DstrainError):
            engine.load_checkpoint(tmp_path / "empty")


def test_checkpoint_of_another_model(dst, tmp_path):
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        engine.save_checkpoint(tmp_path / "ckpt")
    with dst.Engine(config=tiny_config(), model=dict(TINY_GPT, d_model=32)) as other:
        with pytest.raises(dst.CheckpointError):
            other.load_checkpoint(tmp_path / "ckpt")


def test_client_state_must_be_json(dst, tmp_path):
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        with pytest.raises(TypeError):
            engine.save_checkpoint(tmp_path / "c", client_state={"x": object()})
        with pytest.raises(ValueError, match="NUL"):
            engine.save_checkpoint(tmp_path / "c", tag="a\0b")
        assert json.loads(json.dumps(None)) is None
