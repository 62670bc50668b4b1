"""The documented road (docs/models.md), run as written (examples/road/road.sh, 30 steps): a
corpus, a SentencePiece tokenizer from spm_train, `dstrain tokenize`, a
LLaMA-style model trained on the tokens, text generated from the checkpoint
and from its Hugging Face export (the same text: same weights, same seed),
the held-out loss printed."""
import os
import pathlib
import re
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_road_from_text_to_a_hugging_face_model(tmp_path, build_dir):
    env = dict(os.environ, STEPS="30", DSTRAIN=str(build_dir / "dstrain"), OMP_NUM_THREADS="1")
    r = subprocess.run(["bash", str(REPO / "examples" / "road" / "road.sh"), str(tmp_path / "w")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    texts = [line for line in out if line.startswith("The meaning of life")]
    assert len(texts) == 2 and texts[0] == texts[1] and len(texts[0]) > len("The meaning of life")
    assert any(line.startswith("loss ") and "perplexity" in line for line in out)
    assert "train.bin:" in r.stdout and "checkpoint: ckpt/global_step30" in r.stdout
    hf = tmp_path / "w" / "hf_model"
    assert (hf / "config.json").exists() and (hf / "model.safetensors").exists()


def commands(text):
    """Shell lines with continuations joined, comments and blank lines dropped."""
    text = text.replace("\\\n", " ")
    lines = [re.sub(r"\s+", " ", line).strip() for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_documented_road_is_the_script():
    """docs/models.md shows road.sh's commands (that block is run here, not by
    test_docs.py): the script's steps with its variables written as a user types them."""
    script = (REPO / "examples" / "road" / "road.sh").read_text()
    steps = script[script.index("# 1. a corpus"):]
    steps = (steps.replace('"$DSTRAIN"', "dstrain").replace('"$HERE/', "examples/road/")
             .replace('"$STEPS"', "300"))
    steps = re.sub(r"(examples/road/[\w.]+)\"", r"\1", steps)
    page = (REPO / "docs" / "models.md").read_text()
    block = re.search(r"<!-- docs-test: elsewhere \(tests/python/test_road.py\) -->\n```sh\n"
                      r"(.*?)```", page, re.DOTALL)
    assert block, "docs/models.md has no road block marked as run by this test"
    assert commands(block.group(1)) == commands(steps)
