"""Engine and Dataset through the Python SDK: training lowers the loss (GPT,
sequential MSE and cross-entropy), eval and forward_backward leave the state
alone, parameters and gradients come out with their shapes, inputs of any
buffer kind are accepted, and the metadata calls return Python objects."""

from __future__ import annotations

import array
import dataclasses
import json

import numpy as np
import pytest

from sdk_support import TINY_GPT, tiny_config

SEQ = 16


@pytest.fixture
def engine(dst):
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as e:
        yield e


@pytest.fixture
def data(dst, text_file):
    with dst.Dataset.open_text(text_file, val_fraction=0.2, seed=3) as d:
        yield d


def test_gpt_training_lowers_the_loss(dst, data):
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        n = engine.info.local_batch_size
        tokens, targets = data.batch("val", 0, n, SEQ)
        before = engine.eval_batch(tokens, targets)
        assert before == pytest.approx(np.log(256), rel=0.05)  # uniform over bytes
        losses = [engine.train_batch(*data.batch("train", step, n, SEQ)) for step in range(40)]
        after = engine.eval_batch(tokens, targets)
        assert engine.step == 40
        assert all(np.isfinite(losses))
        assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 1.0, losses
        assert after < before - 1.0, (before, after)


def test_sequential_mse_training_lowers_the_loss(dst):
    model = {"type": "sequential", "input_dim": 4, "loss": "mse", "seed": 1,
             "layers": [{"type": "linear", "out_features": 16}, {"type": "relu"},
                        {"type": "linear", "out_features": 2}]}
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 2)).astype(np.float32)
    with dst.Engine(config=tiny_config(), model=model) as engine:
        info = engine.info
        assert (info.model_type, info.loss_type) == (dst.ModelType.SEQUENTIAL, dst.LossType.MSE)
        assert (info.input_dim, info.output_dim, info.seq_len) == (4, 2, 0)
        losses = []
        for _ in range(150):
            x = rng.standard_normal((4, 4)).astype(np.float32)
            losses.append(engine.train_batch(x, x @ w))  # positional: inputs, labels
        x = rng.standard_normal((8, 4)).astype(np.float32)
        test = engine.eval_batch(inputs=x, labels=x @ w)
        assert np.mean(losses[-10:]) < 0.2 * np.mean(losses[:10]), losses
        assert test < 0.2 * np.mean(losses[:10])


def test_sequential_cross_entropy_takes_class_ids(dst):
    model = {"type": "sequential", "input_dim": 3, "loss": "cross_entropy", "seed": 2,
             "layers": [{"type": "linear", "out_features": 8}, {"type": "gelu"},
                        {"type": "linear", "out_features": 3}]}
    rng = np.random.default_rng(1)
    with dst.Engine(config=tiny_config(), model=model) as engine:
        assert engine.info.loss_type == dst.LossType.CROSS_ENTROPY
        losses = []
        for _ in range(100):
            x = rng.standard_normal((4, 3)).astype(np.float32)
            labels = np.argmax(x, axis=1)  # int64: converted to int32
            losses.append(engine.train_batch(inputs=x, targets=labels))
        assert np.mean(losses[-10:]) < np.mean(losses[:10]) - 0.3, losses


def test_eval_and_forward_backward_do_not_step(engine, data):
    n = engine.info.local_batch_size
    tokens, targets = data.batch("train", 0, n, SEQ)
    name = engine.parameters()[0].name
    w0 = engine.get_param(name)
    a = engine.eval_batch(tokens, targets)
    b = engine.forward_backward(tokens, targets)
    assert a == b
    assert engine.step == 0
    np.testing.assert_array_equal(engine.get_param(name), w0)
    grads = {p.name: engine.get_grad(p.name) for p in engine.parameters()}
    assert all(g.shape == p.shape for g, p in zip(grads.values(), engine.parameters()))
    assert any(np.abs(g).sum() > 0 for g in grads.values())
    # eval accepts any multiple of the micro-batch.
    assert np.isfinite(engine.eval_batch(*data.batch("val", 0, 2, SEQ)))
    # A training step follows the gradient: loss on the same batch drops.
    engine.train_batch(tokens, targets)
    assert engine.step == 1 and engine.eval_batch(tokens, targets) < a


def test_parameters_get_set(engine):
    params = engine.parameters()
    names = [p.name for p in params]
    assert names[0] == "transformer.wte.weight" and params[0].shape == (256, 16)
    assert "transformer.h.0.attn.c_attn.weight" in names
    assert sum(p.numel for p in params) == engine.info.num_parameters
    for p in params:
        assert int(np.prod(p.shape)) == p.numel
    w = engine.get_param("transformer.wte.weight")
    assert w.dtype == np.float32 and w.shape == (256, 16)
    new = np.arange(w.size, dtype=np.float64).reshape(w.shape) / w.size  # float64: converted
    engine.set_param("transformer.wte.weight", new)
    np.testing.assert_array_equal(engine.get_param("transformer.wte.weight"), new.astype(np.float32))
    engine.set_param("transformer.wte.weight", new.astype(np.float32).ravel())  # flat is fine
    out = np.empty((256, 16), np.float32)
    assert engine.get_param("transformer.wte.weight", out=out) is out
    with pytest.raises(ValueError, match=r"shape \[256, 16\]"):
        engine.set_param("transformer.wte.weight", new.T)  # transposed: caught in Python
    state = engine.state_dict()
    assert list(state) == names


def test_info_metrics_config(dst, engine, data):
    info = engine.info
    assert isinstance(info, dst.EngineInfo)
    assert (info.train_batch_size, info.micro_batch_size, info.grad_accum_steps) == (4, 2, 2)
    assert info.local_batch_size == 4
    assert (info.rank, info.world_size, info.dp_size) == (0, 1, 1)
    assert (info.seq_len, info.vocab_size) == (16, 256)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.rank = 3  # type: ignore[misc]
    assert engine.learning_rate == pytest.approx(1e-2)
    engine.train_batch(*data.batch("train", 0, 4, SEQ))
    m = engine.metrics()
    assert m["step"] == 1 and m["tokens"] == 4 * SEQ and np.isfinite(m["loss"])
    assert m["memory"]["parameters"]["bytes"] == 4 * info.num_parameters
    status = engine.memory_status()
    categories = status["categories"]
    assert categories["parameters"]["bytes"] == 4 * info.num_parameters
    assert status["total"]["bytes"] == sum(c["bytes"] for c in categories.values())
    assert status["process"]["peak_rss_bytes"] >= status["process"]["rss_bytes"] > 0
    assert status["system"]["total_bytes"] > status["system"]["available_bytes"] > 0
    c = engine.config()
    assert c["optimizer"]["type"] == "AdamW" and c["train_batch_size"] == 4
    assert "gpt" in repr(engine) and "step 1" in repr(engine)


def test_config_and_model_sources(dst, tmp_path):
    """dict, JSON text, str path and pathlib.Path all work."""
    cfg_path, model_path = tmp_path / "ds_config.json", tmp_path / "model.json"
    cfg_path.write_text(json.dumps(tiny_config()))
    model_path.write_text(json.dumps(TINY_GPT))
    for config, model in [
        (tiny_config(), TINY_GPT),
        (json.dumps(tiny_config()), "  " + json.dumps(TINY_GPT)),
        (str(cfg_path), model_path),
        (cfg_path, str(model_path)),
    ]:
        with dst.Engine(config=config, model=model, total_steps=10) as engine:
            assert engine.info.num_parameters > 0
    with pytest.raises(TypeError, match="config must be"):
        dst.Engine(config=42, model=TINY_GPT)


def test_buffer_protocol_inputs(engine, data):
    """array.array, memoryview, lists, int64 arrays and flat 1-D buffers."""
    tokens, targets = data.batch("train", 0, 4, SEQ)
    expected = engine.eval_batch(tokens, targets)
    flat_t = array.array("i", tokens.ravel().tolist())
    flat_g = array.array("i", targets.ravel().tolist())
    assert engine.eval_batch(flat_t, flat_g, seq_len=SEQ) == expected  # 1-D: seq_len given
    assert engine.eval_batch(flat_t, flat_g) == expected  # 1-D: seq_len = n_ctx
    assert engine.eval_batch(memoryview(flat_t), memoryview(flat_g), seq_len=SEQ) == expected
    assert engine.eval_batch(tokens.tolist(), targets.tolist()) == expected
    assert engine.eval_batch(tokens.astype(np.int64), targets.astype(np.uint16)) == expected
    assert engine.eval_batch(tokens=tokens, targets=targets) == expected
    with pytest.raises(TypeError, match="integers"):
        engine.eval_batch(tokens.astype(np.float32), targets)
    with pytest.raises(ValueError, match="int32 range"):
        engine.eval_batch(tokens.astype(np.int64) + 2**32, targets)
    with pytest.raises(TypeError, match="both positionally"):
        engine.eval_batch(tokens, targets, tokens=tokens)
    with pytest.raises(TypeError, match="GPT"):
        engine.eval_batch(inputs=np.zeros((4, 3), np.float32), labels=np.zeros((4, 1), np.float32))


def test_dataset(dst, text_file, tmp_path):
    with dst.Dataset.open_text(text_file, val_fraction=0.25, seed=9) as d:
        size = text_file.stat().st_size
        assert d.num_tokens("train") + d.num_tokens(dst.Split.VAL) == size
        assert d.num_tokens("val") == pytest.approx(size * 0.25, abs=1)
        assert d.path == str(text_file)
        tokens, targets = d.batch("train", 5, 6, SEQ)
        assert tokens.dtype == np.int32 and tokens.shape == (6, SEQ)
        np.testing.assert_array_equal(tokens[:, 1:], targets[:, :-1])  # shifted by one
        text = text_file.read_bytes()
        window = bytes(tokens[0].astype(np.uint8))
        assert window in text
        # Stateless: the same index gives the same batch; slices compose.
        again, _ = d.batch("train", 5, 6, SEQ)
        np.testing.assert_array_equal(tokens, again)
        tail, _ = d.batch("train", 5, 3, SEQ, first_sample=3)
        np.testing.assert_array_equal(tokens[3:], tail)
        other, _ = d.batch("train", 6, 6, SEQ)
        assert not np.array_equal(tokens, other)
        with pytest.raises(ValueError, match="split"):
            d.num_tokens("test")
    with pytest.raises(dst.StateError, match="closed"):
        d.batch("train", 0, 1, SEQ)
    d.close()  # idempotent


def test_default_corpus(dst):
    try:
        d = dst.Dataset.open_text()
    except dst.DstrainIOError as error:
        pytest.skip(f"no default corpus here: {error}")
    with d:
        assert d.num_tokens("train") > 100_000
        assert d.batch("val", 0, 2, 8)[0].shape == (2, 8)


def test_version_and_build_info(dst):
    assert dst.version() == "%d.%d.%d" % divmod_version(dst.version_number())
    assert dst.version().startswith(f"{dst.DST_VERSION_MAJOR}.{dst.DST_VERSION_MINOR}.")
    info = dst.build_info()
    assert info["version"] == dst.version()
    assert "blas" in info and "cuda" in info
    assert dst.library_path.endswith(".so") or ".so." in dst.library_path


def test_io_probe_and_the_offload_report(dst, tmp_path):
    report = dst.io_probe(str(tmp_path), 32 << 20)
    assert report["file_bytes"] == 32 << 20 and len(report["results"]) == 9
    assert report["suggested_config"]["aio"]["block_size"] == report["best"]["block_size"]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(dst.DstrainIOError, match="nowhere"):
        dst.io_probe(str(tmp_path / "nowhere"))
    offload = dst.build_info()["offload"]
    assert offload["io_engine"] in ("io_uring", "pread/pwrite")
    assert offload["cpu_adam"] in ("avx512", "avx2", "scalar")


def divmod_version(number: int):
    return number // 10000, (number // 100) % 100, number % 100


def test_estimate_memory(dst):
    estimate = dst.estimate_memory(tiny_config(), TINY_GPT, world_size=1)
    assert estimate["num_parameters"] == 7664
    stage0 = estimate["stages"][0]
    assert stage0["parameters_bytes"] == 4 * 7664
    with pytest.raises(dst.InvalidArgumentError, match="world_size is 0"):
        dst.estimate_memory(tiny_config(), TINY_GPT, world_size=0)


def test_calls_from_threads_are_serialised(dst, data):
    """The C ABI forbids concurrent calls on one engine; the SDK's lock makes
    calls from several Python threads safe (cffi releases the GIL)."""
    import threading

    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        batches = [data.batch("train", i, 4, SEQ) for i in range(4)]
        errors = []

        def work(i):
            try:
                for _ in range(10):
                    engine.train_batch(*batches[i])
                    engine.metrics()
                    engine.get_param("transformer.wte.weight")
            except Exception as error:  # noqa: BLE001
                errors.append(error)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and engine.step == 40


@pytest.mark.test_hooks
def test_loss_scale_and_skipped_steps(dst, data, monkeypatch):
    """fp16: the scale starts at 2^initial_scale_power and halves on an
    overflow (hysteresis 1), which skips that step; fp32 reports 1 and 0."""
    monkeypatch.setenv("DSTRAIN_INJECT_GRAD_OVERFLOW", "0:1")
    config = tiny_config(fp16={"enabled": True, "initial_scale_power": 8, "hysteresis": 1})
    with dst.Engine(config=config, model=TINY_GPT) as e:
        assert e.loss_scale == 256.0 and e.skipped_steps == 0
        for step in range(3):
            e.train_batch(*data.batch("train", step, 4, SEQ))
        assert e.loss_scale == 128.0
        assert e.skipped_steps == 1
        assert e.step == 3
    monkeypatch.delenv("DSTRAIN_INJECT_GRAD_OVERFLOW")
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as e:
        e.train_batch(*data.batch("train", 0, 4, SEQ))
        assert e.loss_scale == 1.0 and e.skipped_steps == 0


def test_cpu_offload_is_accepted_and_said_to_move_nothing(dst):
    """ZeRO-Offload to "cpu" on the CPU engine: the state is in host memory
    already. The config is accepted, its notes and the metrics say nothing
    moves, and training is what it is without the key (bit for bit)."""
    zero = {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu"}}
    tokens = np.arange(4 * 16, dtype=np.int32).reshape(4, 16) % 256
    losses = []
    for section in (zero, {"stage": 3}):
        with dst.Engine(config=tiny_config(zero_optimization=section), model=TINY_GPT) as e:
            losses.append([float(e.train_batch(tokens, tokens)) for _ in range(2)])
            if "offload_optimizer" in section:
                notes = " ".join(e.config()["dstrain"]["notes"])
                assert "keeps the optimizer state and fp32 master weights in host memory" in notes
                assert e.metrics()["offload"] == {"optimizer": {"device": "cpu", "moved": False},
                                                  "param": {"device": "cpu", "moved": False}}
    assert losses[0] == losses[1]
