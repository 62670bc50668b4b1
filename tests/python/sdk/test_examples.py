"""examples/python/*.py run as a user runs them (a child Python with the SDK
on PYTHONPATH), with small step counts."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from sdk_support import EXAMPLES

TIMEOUT = 300


def run_example(env, name, *args, cwd=None):
    out = subprocess.run([sys.executable, str(EXAMPLES / name), *args], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, f"{name} {args} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def losses(stdout):
    """{step: loss text} from the progress lines."""
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r"^step\s+(\d+)/\d+ \| loss (\S+)", stdout, re.MULTILINE)}


def test_train_gpt_saves_and_resumes(subprocess_env, text_file, tmp_path):
    common = ["--data", str(text_file), "--steps", "8", "--print-every", "1",
              "--eval-batches", "1", "--threads", "1"]
    full = run_example(subprocess_env, "train_gpt.py", *common, "--save", str(tmp_path / "a"),
                       "--save-interval", "4", cwd=tmp_path)
    assert "parameters identical" in full
    assert (tmp_path / "a" / "global_step4").is_dir() and (tmp_path / "a" / "global_step8").is_dir()
    first = losses(full)
    assert sorted(first) == list(range(1, 9))
    assert float(first[8]) < float(first[1])
    # Resume from step 4: steps 5..8 reproduce the uninterrupted run exactly.
    resumed = run_example(subprocess_env, "train_gpt.py", *common, "--load", str(tmp_path / "a"),
                          "--tag", "global_step4", "--save", str(tmp_path / "b"), cwd=tmp_path)
    assert "resumed from" in resumed and "at step 4" in resumed
    second = losses(resumed)
    assert sorted(second) == [5, 6, 7, 8]
    assert second == {k: v for k, v in first.items() if k > 4}


def test_train_gpt_default_corpus(subprocess_env, tmp_path, dst):
    try:
        dst.Dataset.open_text().close()
    except dst.DstrainIOError as error:
        pytest.skip(f"no default corpus: {error}")
    out = run_example(subprocess_env, "train_gpt.py", "--steps", "3", "--print-every", "3",
                      "--eval-batches", "1", "--threads", "1", cwd=tmp_path)
    assert "step     3/3" in out and "parameters identical" in out
    assert list(tmp_path.iterdir()) == []  # without --save nothing is left behind


def test_sequential_mse_loss_falls(subprocess_env, tmp_path):
    out = run_example(subprocess_env, "sequential_mse.py", "--steps", "60", "--print-every", "20",
                      cwd=tmp_path)
    mse = [float(x) for x in re.findall(r"train mse (\S+)", out)]
    assert len(mse) == 3 and mse[-1] < mse[0]
    held_out = float(re.search(r"held-out mse (\S+)", out).group(1))
    variance = float(re.search(r"target variance (\S+)", out).group(1))
    assert held_out < 0.5 * variance, out
