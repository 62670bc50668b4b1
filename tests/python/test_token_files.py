"""Token files for --data (and the SDK's Dataset.open_tokens): llm.c's .bin
(header magic 20240520, version 1, count, then uint16 tokens) and nanoGPT's
raw uint16 .bin train a GPT whose vocabulary holds their ids; the windows are
the file's tokens; a token id beyond the model's vocabulary, a truncated
llm.c file, an odd-sized file and another llm.c version are named."""
import json
import sys

import numpy as np

import test_cli as cli_tests
from test_cli import dstrain  # noqa: F401  (fixture)

sys.path.insert(0, str(cli_tests.pathlib.Path(__file__).resolve().parent / "sdk"))
import sdk_support  # noqa: E402,F401  (puts sdk-python/src on sys.path)

MODEL = {"type": "gpt", "vocab_size": 512, "n_ctx": 16, "n_layer": 1, "n_head": 2,
         "d_model": 16, "seed": 3}


def tokens(n=6000, top=500):
    return (np.arange(n) * 7919 % top).astype(np.uint16)


def llmc(path, toks, version=1, count=None):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, version, len(toks) if count is None else count]
    path.write_bytes(header.tobytes() + toks.tobytes())
    return path


def train(binary, tmp_path, data, model=MODEL):
    (tmp_path / "model.json").write_text(json.dumps(model))
    config = cli_tests.tiny_config(total_num_steps=4)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return cli_tests.run(binary, "train", "--config", tmp_path / "config.json", "--model",
                         tmp_path / "model.json", "--data", data, "--steps", "3")


def test_llmc_and_nanogpt_files_train_a_gpt(dstrain, tmp_path):  # noqa: F811
    for path in (llmc(tmp_path / "train_llmc.bin", tokens()), tmp_path / "train.bin"):
        if not path.exists():
            path.write_bytes(tokens().tobytes())
        out = train(dstrain, tmp_path, path)
        assert out.returncode == 0, out.stderr
        assert "final: step 3" in out.stdout


def test_the_windows_are_the_files_tokens(tmp_path):
    import dstrain as sdk
    toks = tokens()
    for path in (llmc(tmp_path / "a.bin", toks), tmp_path / "b.bin"):
        if not path.exists():
            path.write_bytes(toks.tobytes())
        ds = sdk.Dataset.open_tokens(path, val_fraction=0.1, seed=5)
        assert ds.max_token == int(toks.max())
        assert ds.num_tokens("train") + ds.num_tokens("val") == len(toks)
        batch_tokens, batch_targets = ds.batch("train", 0, 4, 12)
        text = toks.tobytes()
        for row_t, row_y in zip(np.asarray(batch_tokens).reshape(4, 12),
                                np.asarray(batch_targets).reshape(4, 12)):
            window = np.append(row_t, row_y[-1]).astype(np.uint16).tobytes()
            assert window in text  # a window of the file, targets shifted by one


def test_bad_token_files_are_named(dstrain, tmp_path):  # noqa: F811
    big = llmc(tmp_path / "big.bin", tokens(top=600))
    out = train(dstrain, tmp_path, big)
    assert out.returncode == 2 and "token id 599" in out.stderr and "vocab_size" in out.stderr
    short = llmc(tmp_path / "short.bin", tokens(), count=7000)
    out = train(dstrain, tmp_path, short)
    assert out.returncode != 0 and "truncated" in out.stderr, out.stderr
    odd = tmp_path / "odd.bin"
    odd.write_bytes(tokens().tobytes() + b"x")
    out = train(dstrain, tmp_path, odd)
    assert out.returncode != 0 and "odd size" in out.stderr, out.stderr
    v3 = llmc(tmp_path / "v3.bin", tokens(), version=3)
    out = train(dstrain, tmp_path, v3)
    assert out.returncode != 0 and "version 3" in out.stderr, out.stderr
