"""docs/deepspeed_config.md has a row for every top-level key dstrain's
config reader knows (core/config/config_keys.cc), so that no section of a
DeepSpeed config goes unexplained, and every feature section dstrain refuses
names its nearest dstrain feature when refused."""
import json
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "deepspeed_config.md").read_text()
KEYS = re.findall(r'\{kTop, "(\w+)"', (REPO / "core" / "config" / "config_keys.cc").read_text())
FEATURES = ["elasticity", "compression_training", "curriculum_learning",
            "data_efficiency", "progressive_layer_drop", "eigenvalue", "sparse_attention",
            "hybrid_engine", "nebula"]


def test_every_top_level_key_has_a_row():
    assert len(KEYS) > 30
    rows = "\n".join(line for line in DOC.splitlines() if line.startswith("|"))
    missing = [k for k in KEYS if f"`{k}`" not in rows and k not in (
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")]
    assert not missing, f"docs/deepspeed_config.md has no row naming {missing}"
    assert set(FEATURES) <= set(KEYS)


@pytest.mark.parametrize("section", FEATURES)
def test_refused_sections_name_the_nearest_feature(tmp_path, build_dir, section):
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({"train_batch_size": 2, section: {"enabled": True}}))
    out = subprocess.run([str(build_dir / "dstrain"), "estimate", "--config", str(cfg),
                          "--world-size", "1"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert f"{section}: this DeepSpeed feature is not supported by dstrain (nearest: " in \
        out.stderr, out.stderr
    assert "no counterpart" not in out.stderr
