"""DSTRAIN_LOG_LEVEL (like DEEPSPEED_LOG_LEVEL): at debug, every rank logs
the rendezvous, each process group it connects, every collective with its
bytes and each checkpoint phase, each line naming its rank; at the default
level none of it; an unknown level is named once."""
import json
import os
import re
import subprocess

import test_cli as cli_tests
from test_cli import dstrain, job  # noqa: F401  (fixtures)
import test_data_parallel as dp_tests


def launch(binary, job, tmp_path, level):  # noqa: F811
    config = cli_tests.tiny_config(total_num_steps=4)
    config["train_micro_batch_size_per_gpu"] = 4
    path = tmp_path / "log.json"
    path.write_text(json.dumps(config))
    env = dict(os.environ)
    env.pop("DSTRAIN_LOG_LEVEL", None)
    if level is not None:
        env["DSTRAIN_LOG_LEVEL"] = level
    return subprocess.run(
        [str(binary), "launch", "--nproc-per-node", "2", "--master-port",
         str(dp_tests.free_port()), "--", str(binary), "train", "--config", str(path),
         "--model", str(job["model"]), "--data", str(job["data"]), "--steps", "2",
         "--save", str(tmp_path / "ckpt")],
        capture_output=True, text=True, timeout=cli_tests.TIMEOUT, env=env)


def test_debug_logs_rendezvous_groups_collectives_and_checkpoints(dstrain, job, tmp_path):  # noqa: F811
    out = launch(dstrain, job, tmp_path, "debug")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("[dstrain ")]
    for rank in (0, 1):
        mine = [line for line in lines if f" rank {rank} " in line]
        text = "\n".join(mine)
        assert "debug rendezvous]" in text and "same config" in text
        assert re.search(r"debug groups\] dp\[0,1\] connected", text)
        assert re.search(r"debug comm\] (allreduce|reduce) dp \d+ bytes", text)
        assert "debug checkpoint] save_checkpoint" in text
        assert "info job] joined: rank %d of 2" % rank in text
    assert any("hosting the store" in line and " rank 0 " in line for line in lines)


def test_default_level_is_quiet_and_a_bad_level_is_named(dstrain, job, tmp_path):  # noqa: F811
    quiet = launch(dstrain, job, tmp_path, None)
    assert quiet.returncode == 0, quiet.stderr
    assert "[dstrain " not in quiet.stderr
    bad = launch(dstrain, job, tmp_path, "verbose")
    assert bad.returncode == 0, bad.stderr
    assert 'DSTRAIN_LOG_LEVEL="verbose" is not a level' in bad.stderr
    assert "debug comm]" not in bad.stderr
