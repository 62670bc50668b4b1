"""A short soak (scripts/soak.py; the long one is 1,000 cycles and 20
minutes): engines created, trained, checkpointed and destroyed in one process
give back every descriptor and thread, and the resident set stops growing;
a 2-rank job that checkpoints as it trains holds its descriptors, threads and
memory flat."""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def soak(*args):
    out = subprocess.run([sys.executable, str(ROOT / "scripts/soak.py"), *args],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert out.returncode == 0, out.stderr + out.stdout
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_create_train_destroy_cycles_give_everything_back():
    s = soak("cycles", "--cycles", "200", "--warmup", "50", "--max-rss-slope", str(64 * 1024))
    assert s["samples"] == 150
    assert s["fds"]["late"] == s["fds"]["early"]
    assert s["threads"]["late"] == s["threads"]["early"]
    assert s["rss_bytes"]["slope"] < 64 * 1024, s  # bytes per cycle


def test_a_checkpointing_two_rank_job_stays_flat():
    s = soak("train", "--minutes", "0.75", "--save-interval", "40", "--sample-seconds", "1.5",
             "--warmup-minutes", "0.2", "--max-rss-slope", str(32 << 20))
    assert s["checkpoints_kept"] >= 1, s
    for rank in ("0", "1"):
        r = s["ranks"][rank]
        assert r["samples"] >= 10, s
        assert r["fds"]["late"] <= r["fds"]["early"], s
        assert r["threads"]["late"] <= r["threads"]["early"], s
