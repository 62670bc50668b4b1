"""Checkpoints round-trip through the Python SDK: save -> a new engine ->
load gives the same parameters, step, learning rate, client_state and the
same next losses, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from sdk_support import TINY_GPT, tiny_config

SEQ = 16


def config():
    return tiny_config(scheduler={"type": "WarmupCosineLR",
                                  "params": {"total_num_steps": 12, "warmup_num_steps": 3}})


def test_round_trip(dst, text_file, tmp_path):
    data = dst.Dataset.open_text(text_file, seed=11)

    def batch(step):
        return data.batch("train", step, 4, SEQ)

    with dst.Engine(config=config(), model=TINY_GPT) as a:
        for step in range(5):
            a.train_batch(*batch(step))
        state = {"epoch": 2, "data": {"position": 5, "files": ["a", "b"]}, "ratio": 0.5}
        path = a.save_checkpoint(tmp_path / "ckpt", client_state=state)
        assert path == tmp_path / "ckpt" / "global_step5"
        assert (tmp_path / "ckpt" / "latest").read_text().strip() == "global_step5"
        saved = a.state_dict()
        lr = a.learning_rate
        continued = [a.train_batch(*batch(step)) for step in range(5, 10)]
        after = a.state_dict()

    with dst.Engine(config=config(), model=TINY_GPT) as b:
        assert b.step == 0
        assert b.load_checkpoint(tmp_path / "ckpt") == state
        assert b.step == 5 and b.learning_rate == lr
        for name, value in saved.items():
            np.testing.assert_array_equal(b.get_param(name), value, err_msg=name)
        resumed = [b.train_batch(*batch(step)) for step in range(5, 10)]
        assert [float.hex(x) for x in resumed] == [float.hex(x) for x in continued]
        for name, value in after.items():
            np.testing.assert_array_equal(b.get_param(name), value, err_msg=name)
    data.close()


def test_tags_and_empty_client_state(dst, tmp_path):
    with dst.Engine(config=config(), model=TINY_GPT) as engine:
        w0 = engine.get_param("transformer.wpe.weight")
        first = engine.save_checkpoint(str(tmp_path), tag="first")
        assert first == tmp_path / "first"
        engine.set_param("transformer.wpe.weight", np.zeros_like(w0))
        engine.save_checkpoint(tmp_path, tag="zeros", client_state=[1, "two", None])
        assert engine.load_checkpoint(tmp_path, tag="first") is None  # no client_state
        np.testing.assert_array_equal(engine.get_param("transformer.wpe.weight"), w0)
        assert engine.load_checkpoint(tmp_path) == [1, "two", None]  # latest = zeros
        assert not engine.get_param("transformer.wpe.weight").any()


def test_failed_load_leaves_the_engine_unchanged(dst, tmp_path):
    with dst.Engine(config=config(), model=TINY_GPT) as engine:
        engine.save_checkpoint(tmp_path, tag="good")
        (tmp_path / "good" / "zero_rank_0.safetensors").write_bytes(b"garbage")
        before = engine.state_dict()
        with pytest.raises(dst.CheckpointError):
            engine.load_checkpoint(tmp_path, tag="good")
        for name, value in before.items():
            np.testing.assert_array_equal(engine.get_param(name), value)


def test_an_edited_meta_json_is_refused_and_inspect_says_so(dst, tmp_path):
    """meta.json decides the step, the optimizer's step count and the seeds; its
    checksum is kept in meta.json.sum, so editing it cannot go unnoticed."""
    with dst.Engine(config=config(), model=TINY_GPT) as engine:
        engine.save_checkpoint(tmp_path, tag="t")
    meta = tmp_path / "t" / "meta.json"
    assert (tmp_path / "t" / "meta.json.sum").exists()
    meta.write_text(meta.read_text().replace('"step": 0', '"step": 7', 1))
    with dst.Engine(config=config(), model=TINY_GPT) as engine:
        with pytest.raises(dst.CheckpointError, match="does not match the checksum"):
            engine.load_checkpoint(tmp_path, tag="t")
        assert engine.step == 0  # nothing was loaded
    with pytest.raises(dst.CheckpointError, match="meta.json does not match"):
        dst.inspect_checkpoint(tmp_path, tag="t")
    (tmp_path / "t" / "meta.json.sum").unlink()
    with dst.Engine(config=config(), model=TINY_GPT) as engine:
        with pytest.raises(dst.CheckpointError, match="meta.json.sum is missing"):
            engine.load_checkpoint(tmp_path, tag="t")


def test_a_model_that_computes_differently_is_refused_naming_the_field(dst, tmp_path):
    """n_head changes no tensor's shape, so the tensors alone cannot show it."""
    with dst.Engine(config=config(), model=TINY_GPT) as engine:
        engine.save_checkpoint(tmp_path, tag="t")
    other = dict(TINY_GPT, n_head=4)
    with dst.Engine(config=config(), model=other) as engine:
        with pytest.raises(dst.CheckpointError,
                           match="n_head: 2 in the checkpoint, 4 here"):
            engine.load_checkpoint(tmp_path, tag="t")


def test_load_weights_takes_the_weights_of_a_differently_computing_model(dst, tmp_path):
    """Asked for explicitly, the weights alone load into another n_head: the
    tensors, not the step or the optimizer state."""
    with dst.Engine(config=config(), model=TINY_GPT) as engine:
        engine.set_param("transformer.wpe.weight",
                         np.full_like(engine.get_param("transformer.wpe.weight"), 0.25))
        saved = engine.state_dict()
        engine.save_checkpoint(tmp_path, tag="t")
    with dst.Engine(config=config(), model=dict(TINY_GPT, n_head=4)) as engine:
        engine.load_weights(tmp_path, tag="t")
        assert engine.step == 0
        for name, value in saved.items():
            np.testing.assert_array_equal(engine.get_param(name), value, err_msg=name)
    with dst.Engine(config=config(), model=dict(TINY_GPT, d_model=32)) as engine:
        with pytest.raises(dst.CheckpointError, match="transformer"):  # shapes differ
            engine.load_weights(tmp_path, tag="t")


@pytest.mark.parametrize("tag", ["latest", ".hidden", "global_step1.tmp", "a/b", "..", ""])
def test_reserved_and_unsafe_tags_are_refused_before_anything_is_written(dst, tmp_path, tag):
    target = tmp_path / "ckpt"
    with dst.Engine(config=config(), model=TINY_GPT) as engine:
        with pytest.raises(dst.InvalidArgumentError, match="checkpoint tag"):
            engine.save_checkpoint(target, tag=tag)
    assert not target.exists() or not any(target.iterdir())
