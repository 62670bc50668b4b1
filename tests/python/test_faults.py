"""Faults end in clear errors, never hangs.

A rank killed with SIGKILL mid-training: every surviving rank exits non-zero
within the (short, test-set) collective timeout, naming the failed operation
and the lost rank; under `dstrain launch` the launcher reports the rank that
died first and stops the others. Also: a stray process with the wrong job
token, a port already in use, and ranks started with different configs.
"""
import json
import os
import secrets
import signal
import socket
import subprocess
import time

import pytest

import proc_tree
import test_data_parallel as dp_tests

COMM_TIMEOUT = 15  # seconds; the test allows a little more for process teardown


@pytest.fixture(scope="module")
def tool(build_dir):
    return os.path.join(build_dir, "tests", "dst_dp_tool")


@pytest.fixture(scope="module")
def cli(build_dir):
    return os.path.join(build_dir, "dstrain")


def job_files(tmp_path, world, lr=3e-3):
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": lr}},
              "dstrain": {"num_threads": 1, "comm_timeout_seconds": COMM_TIMEOUT}}
    cfg = tmp_path / f"cfg_{lr}.json"
    cfg.write_text(json.dumps(config))
    model = tmp_path / "model.json"
    model.write_text(json.dumps(dp_tests.MODEL))
    return cfg, model


def spawn_rank(tool, cfg, model, rank, world, port, token, steps=100000):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", RANK=str(rank),
               WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DSTRAIN_JOB_TOKEN=token)
    return subprocess.Popen([tool, "--model", str(model), "--config", str(cfg), "--steps",
                             str(steps), "--progress", "1"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_progress(proc, steps=3, timeout=60):
    """Reads the rank's stderr until it has finished `steps` steps."""
    deadline = time.monotonic() + timeout
    seen = 0
    while seen < steps:
        assert time.monotonic() < deadline, "ranks did not start training"
        line = proc.stderr.readline()
        assert line, f"rank exited early ({proc.wait()})"
        if line.startswith("step "):
            seen += 1


def kill_rank_1_and_check_survivors(tool, cfg, model, world, ops):
    """Starts `world` ranks, kills rank 1 with SIGKILL after a few steps and
    checks that every survivor exits non-zero within the timeout, naming rank
    1 and one of `ops`."""
    port, token = dp_tests.free_port(), secrets.token_hex(8)
    procs = [spawn_rank(tool, cfg, model, r, world, port, token) for r in range(world)]
    try:
        wait_for_progress(procs[0])
        killed_at = time.monotonic()
        procs[1].send_signal(signal.SIGKILL)
        for rank in [r for r in range(world) if r != 1]:
            _, err = procs[rank].communicate(timeout=COMM_TIMEOUT + 30)
            elapsed = time.monotonic() - killed_at
            assert procs[rank].returncode != 0, f"rank {rank} survived silently"
            assert elapsed < COMM_TIMEOUT + 10, f"rank {rank} took {elapsed:.0f} s to give up"
            assert "rank 1 died first" in err, f"rank {rank} did not name the lost rank:\n{err}"
            assert any(op in err for op in ops), err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_killed_rank_is_named_by_every_survivor(tmp_path, tool):
    cfg, model = job_files(tmp_path, 3)
    kill_rank_1_and_check_survivors(tool, cfg, model, 3, ("allreduce", "reduce", "allgather"))


@pytest.mark.parametrize("stage", [2, 3])
def test_killed_rank_in_the_sparse_reduce_scatter_is_named(tmp_path, tool, stage):
    """gradient_compression at ZeRO 2/3 sends each piece to its owner alone
    (Huffman: a size word, then the payload): a lost peer's missing sends end
    every survivor's receive with a named error within the timeout."""
    cfg, model = job_files(tmp_path, 3)
    config = json.loads(cfg.read_text())
    config["zero_optimization"] = {"stage": stage}
    config["gradient_compression"] = {"algorithm": "topk", "huffman_coding": True}
    cfg.write_text(json.dumps(config))
    kill_rank_1_and_check_survivors(tool, cfg, model, 3, ("recv", "send", "allgather"))


@pytest.mark.test_hooks
@pytest.mark.parametrize("world,layout", [
    (3, {}), (2, {"tensor_parallel": {"tp_size": 2}}),
    (2, {"pipeline_parallel": {"pp_size": 2}, "pipeline": {"schedule": "zb-h1"},
         "gradient_accumulation_steps": 4})], ids=["dp3", "tp2", "pp2-zb"])
def test_killed_rank_on_a_device_is_named_by_every_survivor(tmp_path, tool, monkeypatch, world,
                                                           layout):
    """On a device each group is a Gloo host group plus a device twin (here
    the guarded stand-in's, a second Gloo group): a rank lost in either still
    ends every survivor with a named error within the timeout. Under tensor
    parallelism the layers' collectives are waited for by the device's stream
    and the host goes on: the step's end names the one that never came. Under
    pipeline parallelism the stages' exchanges go over the device twin and
    are waited for the same way."""
    cfg, model = job_files(tmp_path, world)
    config = json.loads(cfg.read_text())
    config["dstrain"]["device"] = "cuda"
    config.update(layout)
    cfg.write_text(json.dumps(config))
    monkeypatch.setenv("DSTRAIN_TEST_DEVICE", "guarded")
    kill_rank_1_and_check_survivors(tool, cfg, model, world,
                                    ("allreduce", "reduce", "allgather", "send", "recv"))


def test_launcher_reports_the_rank_that_died_first(tmp_path, tool, cli):
    cfg, model = job_files(tmp_path, 2)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    launcher = subprocess.Popen(
        [cli, "launch", "--nproc-per-node", "2", "--master-port", str(dp_tests.free_port()),
         "--", tool, "--model", str(model), "--config", str(cfg), "--steps", "100000",
         "--progress", "1"], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_progress(launcher)
        children = proc_tree.children(launcher.pid)
        assert len(children) == 2, children
        # The ranks were spawned in order: the second child is rank 1.
        os.kill(children[1], signal.SIGKILL)
        _, err = launcher.communicate(timeout=COMM_TIMEOUT + 40)
        assert launcher.returncode != 0
        assert "rank 1" in err and "failed first" in err and "signal 9" in err, err
    finally:
        if launcher.poll() is None:
            launcher.kill()


def run_pair(tool, cfgs, model, tokens, port):
    procs = [spawn_rank(tool, cfgs[r], model, r, 2, port, tokens[r], steps=2) for r in range(2)]
    outs = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=COMM_TIMEOUT + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
        outs.append((p.returncode, err))
    return outs


def test_wrong_job_token_is_refused(tmp_path, tool):
    cfg, model = job_files(tmp_path, 2)
    outs = run_pair(tool, [cfg, cfg], model, ["a" * 16, "b" * 16], dp_tests.free_port())
    assert outs[1][0] != 0
    assert "job token mismatch" in outs[1][1], outs[1][1]
    assert outs[0][0] != 0  # rank 0 waits for a rank that never joins, then gives up


def test_port_in_use_is_named(tmp_path, tool):
    cfg, model = job_files(tmp_path, 2)
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        token = secrets.token_hex(8)
        outs = run_pair(tool, [cfg, cfg], model, [token, token], port)
    assert outs[0][0] != 0
    assert f"port {port} is already in use" in outs[0][1], outs[0][1]


def test_mismatched_configs_are_refused(tmp_path, tool):
    cfg_a, model = job_files(tmp_path, 2, lr=1e-3)
    cfg_b, _ = job_files(tmp_path, 2, lr=2e-3)
    token = secrets.token_hex(8)
    outs = run_pair(tool, [cfg_a, cfg_b], model, [token, token], dp_tests.free_port())
    assert all(code != 0 for code, _ in outs)
    assert any("different config" in err for _, err in outs), outs
