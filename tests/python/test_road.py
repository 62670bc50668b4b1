"""The documented road (docs/models.md), run as written (examples/road/road.sh, 30 steps): a
corpus, a SentencePiece tokenizer from spm_train, `dstrain tokenize`, a
LLaMA-style model trained on the tokens, text generated from the checkpoint
and from its Hugging Face export (the same text: same weights, same seed),
the held-out loss printed."""
import os
import pathlib
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
