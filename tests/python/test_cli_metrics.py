"""`dstrain train --metrics-port`: the flag turns on the metrics server and the
dashboard without editing the config; every rank prints its address."""

import json
import os
import re
import subprocess
import time
import urllib.request

import pytest

TINY_MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 1, "n_head": 2,
              "d_model": 32, "seed": 7}


def fetch(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.status, reply.read().decode()


def test_metrics_port_flag_serves_metrics_and_dashboard(build_dir, tmp_path):
    model = tmp_path / "model.json"
    model.write_text(json.dumps(TINY_MODEL))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen([os.path.join(build_dir, "dstrain"), "train", "--model", str(model),
                             "--steps", "1000000", "--quiet", "--metrics-port", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "dstrain exited before printing its address"
            match = re.search(r"metrics: (http://127\.0\.0\.1:\d+/) \(dashboard\)", line)
            if match:
                url = match.group(1)
        assert url, "no metrics address printed"
        status, page = fetch(url)
        assert status == 200 and "<html" in page.lower()
        steps = 0
        while steps < 2 and time.monotonic() < deadline:
            status, text = fetch(url + "metrics")
            assert status == 200
            found = re.search(r"^dstrain_steps_total\{[^}]*\} (\S+)$", text, re.M)
            steps = float(found.group(1)) if found else 0
            time.sleep(0.2)
        assert steps >= 2, "the step counter did not advance"
        status, text = fetch(url + "api/v1/config")
        assert json.loads(text)["dstrain"]["monitor"]["http"]["enabled"] is True
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.test_hooks
def test_fp16_progress_lines_show_the_loss_scale(build_dir, tmp_path):
    model = tmp_path / "model.json"
    model.write_text(json.dumps(TINY_MODEL))
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"train_batch_size": 4, "steps_per_print": 2,
                                  "optimizer": {"type": "AdamW"},
                                  "fp16": {"enabled": True, "initial_scale_power": 8,
                                           "hysteresis": 1},
                                  "dstrain": {"num_threads": 1}}))
    env = dict(os.environ, OMP_NUM_THREADS="1", DSTRAIN_INJECT_GRAD_OVERFLOW="0:2")
    out = subprocess.run([os.path.join(build_dir, "dstrain"), "train", "--model", str(model),
                          "--config", str(config), "--steps", "6"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stdout.splitlines() if l.startswith("step ") and "loss " in l]
    assert any("scale 256" in l for l in lines), out.stdout
    assert any("scale 128 (1 skipped)" in l for l in lines), out.stdout
