"""Checkpoints as a user meets them on disk: `dstrain ckpt inspect` and
`dstrain ckpt export`, a save killed with SIGKILL half-way, and a flipped byte.

Needs $DSTRAIN_BUILD_DIR (the `dstrain` binary); skips when it is unset."""

import json
import os
import signal
import subprocess
import time

import pytest

from safetensors_io import load_numpy

TIMEOUT = 300

TINY_MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 1, "n_head": 2,
              "d_model": 32, "seed": 7}
# Large enough that writing a checkpoint (about 150 MB) takes a while.
BIG_MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 8, "n_layer": 4, "n_head": 4,
             "d_model": 512, "seed": 7}


def config():
    return {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "dstrain": {"num_threads": 1}}


@pytest.fixture(scope="module")
def dstrain(build_dir):
    return os.path.join(build_dir, "dstrain")


def write_job(tmp_path, model):
    cfg, spec = tmp_path / "ds_config.json", tmp_path / "model.json"
    cfg.write_text(json.dumps(config()))
    spec.write_text(json.dumps(model))
    return cfg, spec


def run(cmd, **kwargs):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env, **kwargs)


def train(dstrain, cfg, spec, *args):
    out = run([dstrain, "train", "--config", str(cfg), "--model", str(spec), "--quiet", *args])
    assert out.returncode == 0, out.stderr
    return out


@pytest.fixture
def saved(tmp_path, dstrain):
    cfg, spec = write_job(tmp_path, TINY_MODEL)
    ckpt = tmp_path / "ckpt"
    train(dstrain, cfg, spec, "--steps", "3", "--save", str(ckpt))
    return ckpt, cfg, spec


def test_inspect_describes_and_verifies_a_checkpoint(dstrain, saved):
    ckpt, _, _ = saved
    out = run([dstrain, "ckpt", "inspect", str(ckpt)])
    assert out.returncode == 0, out.stderr
    assert "step            3" in out.stdout
    assert "ZeRO stage 0" in out.stdout and "fp32" in out.stdout
    assert "valid: every file matches its checksum" in out.stdout
    info = json.loads(run([dstrain, "ckpt", "inspect", str(ckpt), "--json"]).stdout)
    assert info["tag"] == "global_step3" and info["step"] == 3 and info["valid"]
    assert {f["name"] for f in info["files"]} == {"model.safetensors", "zero_rank_0.safetensors"}
    assert all(f["verified"] for f in info["files"])
    numel = sum(t["numel"] for t in info["tensors"])
    assert numel == info["num_parameters"]
    assert info["shards"] == [{"file": "zero_rank_0.safetensors", "rank": 0, "begin": 0,
                               "end": numel, "tensors": ["exp_avg", "exp_avg_sq"]}]


def test_a_flipped_byte_is_reported_with_the_file_name(dstrain, saved):
    ckpt, cfg, spec = saved
    victim = ckpt / "global_step3" / "zero_rank_0.safetensors"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x10
    victim.write_bytes(bytes(data))
    out = run([dstrain, "ckpt", "inspect", str(ckpt)])
    assert out.returncode == 1
    assert "zero_rank_0.safetensors" in out.stdout and "BAD" in out.stdout
    assert "checksum" in out.stdout and "INVALID" in out.stdout
    load = run([dstrain, "train", "--config", str(cfg), "--model", str(spec), "--quiet",
                "--steps", "4", "--load", str(ckpt)])
    assert load.returncode != 0
    assert "zero_rank_0.safetensors" in load.stderr and "checksum" in load.stderr


def test_export_writes_the_consolidated_weights(dstrain, saved, tmp_path):
    ckpt, _, _ = saved
    out_file = tmp_path / "model.safetensors"
    out = run([dstrain, "ckpt", "export", str(ckpt), "--out", str(out_file)])
    assert out.returncode == 0, out.stderr
    exported, _ = load_numpy(str(out_file))
    original, _ = load_numpy(str(ckpt / "global_step3" / "model.safetensors"))
    assert set(exported) == set(original)
    for name, value in original.items():
        assert (exported[name] == value).all(), name
    assert not (tmp_path / "model.safetensors.tmp").exists()


def test_export_of_a_missing_checkpoint_is_a_clear_error(dstrain, tmp_path):
    out = run([dstrain, "ckpt", "export", str(tmp_path / "nowhere"), "--out",
               str(tmp_path / "x.safetensors")])
    assert out.returncode != 0
    assert "does not exist" in out.stderr
    assert not (tmp_path / "x.safetensors").exists()


def test_a_save_killed_midway_leaves_the_previous_checkpoint_loadable(dstrain, tmp_path):
    """SIGKILL while a checkpoint is being written (its staging directory
    exists): DIR/latest still names the previous, complete tag, which
    verifies and loads; the partial one never became a tag."""
    cfg, spec = write_job(tmp_path, BIG_MODEL)
    ckpt = tmp_path / "ckpt"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen([dstrain, "train", "--config", str(cfg), "--model", str(spec),
                             "--quiet", "--steps", "1000", "--save", str(ckpt),
                             "--save-interval", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    killed_during = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            latest = ckpt / "latest"
            staging = [p for p in ckpt.glob(".global_step*.tmp")] if ckpt.exists() else []
            if latest.exists() and staging:
                proc.send_signal(signal.SIGKILL)
                killed_during = staging[0].name
                break
            time.sleep(0.002)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    assert killed_during, "never saw a save in progress after a complete one"
    assert proc.returncode == -signal.SIGKILL
    assert (ckpt / killed_during).exists(), "the kill landed after the save finished"
    partial_tag = killed_during[1:-len(".tmp")]
    assert not (ckpt / partial_tag).exists()
    good = (ckpt / "latest").read_text().strip()
    assert good != partial_tag and (ckpt / good / "meta.json").exists()
    info = json.loads(run([dstrain, "ckpt", "inspect", str(ckpt), "--json"]).stdout)
    assert info["valid"] and info["tag"] == good
    step = info["step"]
    resumed = run([dstrain, "train", "--config", str(cfg), "--model", str(spec), "--quiet",
                   "--steps", str(step + 1), "--load", str(ckpt), "--save", str(ckpt)])
    assert resumed.returncode == 0, resumed.stderr
    # The next save of any tag cleans its own leftover staging directory.
    assert (ckpt / "latest").read_text().strip() == f"global_step{step + 1}"


def test_a_full_disk_fails_the_save_by_name_and_keeps_the_previous_checkpoint(dstrain, tmp_path):
    """On a small tmpfs with room for about one and a half checkpoints, a run
    that saves every step starts (--save is checked up front and there is
    room for one), its first save lands, and the next one fails with an
    error naming the file and the cause; `latest` still names the last good
    checkpoint, which verifies and loads, and no partial tag is left. With
    no room at all the run is refused before its first step."""
    disk = tmp_path / "small"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        cfg, spec = write_job(tmp_path, TINY_MODEL)
        ckpt = disk / "ckpt"
        train(dstrain, cfg, spec, "--steps", "2", "--save", str(ckpt))
        used = sum(p.stat().st_size for p in (ckpt / "global_step2").iterdir())
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        (disk / "filler").write_bytes(b"\0" * max(0, free - used * 3 // 2))
        out = run([dstrain, "train", "--config", str(cfg), "--model", str(spec), "--quiet",
                   "--steps", "4", "--load", str(ckpt), "--save", str(ckpt),
                   "--save-interval", "1"])
        assert out.returncode != 0
        assert "No space left on device" in out.stderr or "disk full" in out.stderr, out.stderr
        assert "global_step4" in out.stderr, out.stderr
        assert (ckpt / "latest").read_text().strip() == "global_step3"
        assert not (ckpt / "global_step4").exists()
        assert not list(ckpt.glob(".*.tmp")), "the partial checkpoint was not removed"
        # No room for one checkpoint: refused before the first step.
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        (disk / "filler2").write_bytes(b"\0" * max(0, free - 4096))
        out = run([dstrain, "train", "--config", str(cfg), "--model", str(spec), "--quiet",
                   "--steps", "5", "--load", str(ckpt), "--save", str(ckpt)])
        assert out.returncode != 0
        assert "one checkpoint of this rank needs about" in out.stderr, out.stderr
        (disk / "filler").unlink()
        (disk / "filler2").unlink()
        info = json.loads(run([dstrain, "ckpt", "inspect", str(ckpt), "--json"]).stdout)
        assert info["valid"] and info["step"] == 3
        train(dstrain, cfg, spec, "--steps", "4", "--load", str(ckpt))
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
