"""The README's Python snippet runs. SNIPPET is the text proposed for the
README's "Python" section; once README.md has a Python section, every
```python block in it is run as well (so the README cannot rot)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from sdk_support import REPO

SNIPPET = '''\
import dstrain

config = {"train_batch_size": 16,
          "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}}
model = {"type": "gpt", "vocab_size": 256, "n_ctx": 64,
         "n_layer": 2, "n_head": 4, "d_model": 64}

data = dstrain.Dataset.open_text()        # the default corpus, or open_text("my.txt")
with dstrain.Engine(config=config, model=model) as engine:
    n = engine.info.local_batch_size      # micro-batch x gradient accumulation
    for step in range(50):
        tokens, targets = data.batch("train", step, n, 64)  # int32 [n, 64]
        loss = engine.train_batch(tokens, targets)           # numpy in, no copy
    print(f"step {engine.step}: loss {loss:.2f}, "
          f"{engine.metrics()['tokens_per_sec']:.0f} tokens/s")
    engine.save_checkpoint("ckpt", client_state={"note": "50 steps"})  # ckpt/global_step50/

try:
    dstrain.Engine(config={"train_batch_size": 16, "optimiser": {}}, model=model)
except dstrain.ConfigError as error:
    print(error)  # unknown key "optimiser" at top level; did you mean "optimizer"?
'''


def readme_python_blocks():
    text = (REPO / "README.md").read_text()
    match = re.search(r"^##+ [^\n]*Python[^\n]*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    if not match:
        return []
    return re.findall(r"```python\n(.*?)```", match.group(1), re.DOTALL)


def run_snippet(code, env, cwd):
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, f"snippet failed:\n{code}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def _need_default_corpus(dst):
    try:
        dst.Dataset.open_text().close()
    except dst.DstrainIOError as error:
        pytest.skip(f"the snippet reads the default corpus, which is missing: {error}")


def test_proposed_snippet(dst, subprocess_env, tmp_path):
    _need_default_corpus(dst)
    out = run_snippet(SNIPPET, subprocess_env, tmp_path)
    first = re.match(r"step 50: loss (\S+), \d+ tokens/s", out)
    assert first, out
    assert float(first.group(1)) < 4.0  # from 5.55 (uniform over 256 bytes)
    assert 'did you mean "optimizer"' in out
    assert (tmp_path / "ckpt" / "global_step50" / "meta.json").is_file()


def test_readme_python_section(dst, subprocess_env, tmp_path):
    blocks = readme_python_blocks()
    if not blocks:
        pytest.skip("README.md has no Python section with ```python blocks yet")
    _need_default_corpus(dst)
    for i, block in enumerate(blocks):
        cwd = tmp_path / f"block{i}"
        cwd.mkdir()
        run_snippet(block, subprocess_env, cwd)


def test_sdk_readme_has_the_snippet():
    """sdk-python/README.md shows the same (tested) code."""
    assert SNIPPET in (REPO / "sdk-python" / "README.md").read_text()
