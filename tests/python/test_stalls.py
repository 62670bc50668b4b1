"""A rank that is alive but stuck is treated like a dead one: a SIGSTOPped
rank (each rank in turn, at 2 and 4 ranks) is named by every other rank,
which exits within about comm_timeout_seconds (the ranks' heartbeats through
the rendezvous store stop); a rank that sleeps in user code between two
train_batch calls is named as alive but elsewhere."""
import os
import secrets
import signal
import subprocess
import time

import pytest

import proc_tree
import test_data_parallel as dp_tests
import test_faults as faults

TIMEOUT = 4  # comm_timeout_seconds of these jobs
SLACK = 3    # process start-up and teardown on a loaded 2-core machine


def spawn(tool, cfg, model, rank, world, port, token, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", RANK=str(rank),
               WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DSTRAIN_JOB_TOKEN=token)
    return subprocess.Popen([tool, "--model", str(model), "--config", str(cfg), "--steps",
                             "100000", "--progress", "1", *extra], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def job(tmp_path, world):
    faults.COMM_TIMEOUT = TIMEOUT
    return faults.job_files(tmp_path, world)


@pytest.mark.parametrize("world,victim", [(2, 0), (2, 1), (4, 0), (4, 1), (4, 2), (4, 3)])
def test_a_stopped_rank_is_named_within_the_timeout(tmp_path, build_dir, world, victim):
    tool = os.path.join(build_dir, "tests", "dst_dp_tool")
    cfg, model = job(tmp_path, world)
    port, token = dp_tests.free_port(), secrets.token_hex(8)
    procs = [spawn(tool, cfg, model, r, world, port, token) for r in range(world)]
    try:
        faults.wait_for_progress(procs[1 if victim == 0 else 0], steps=3)
        stopped_at = time.monotonic()
        procs[victim].send_signal(signal.SIGSTOP)
        for rank in range(world):
            if rank == victim:
                continue
            _, err = procs[rank].communicate(timeout=TIMEOUT + 60)
            elapsed = time.monotonic() - stopped_at
            assert procs[rank].returncode != 0, f"rank {rank} survived silently"
            assert elapsed < TIMEOUT + SLACK, f"rank {rank} took {elapsed:.1f} s:\n{err}"
            if victim == 0:  # it hosts the store: its silence is the store's
                assert "rank 0" in err and "stalled" in err, err
            else:
                assert f"rank {victim} has stalled" in err, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()


def test_a_rank_busy_in_user_code_is_named(tmp_path, build_dir):
    tool = os.path.join(build_dir, "tests", "dst_dp_tool")
    cfg, model = job(tmp_path, 2)
    port, token = dp_tests.free_port(), secrets.token_hex(8)
    procs = [spawn(tool, cfg, model, r, 2, port, token, "--sleep", "1:5:60") for r in range(2)]
    try:
        _, err = procs[0].communicate(timeout=TIMEOUT + 60)
        assert procs[0].returncode != 0
        assert "rank 1 is alive" in err and "has not reached step 5" in err, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_the_launcher_names_the_stopped_rank_as_the_cause(tmp_path, build_dir):
    tool = os.path.join(build_dir, "tests", "dst_dp_tool")
    cli = os.path.join(build_dir, "dstrain")
    cfg, model = job(tmp_path, 2)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    launcher = subprocess.Popen(
        [cli, "launch", "--nproc-per-node", "2", "--master-port", str(dp_tests.free_port()),
         "--", tool, "--model", str(model), "--config", str(cfg), "--steps", "100000",
         "--progress", "1"], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    victim = None
    try:
        faults.wait_for_progress(launcher)
        children = proc_tree.children(launcher.pid)
        assert len(children) == 2, children
        victim = children[1]  # spawned in order: rank 1
        os.kill(victim, signal.SIGSTOP)
        _, err = launcher.communicate(timeout=TIMEOUT + 60)
        assert launcher.returncode != 0
        assert f"rank 1 (pid {victim}) is stopped" in err and "is the cause" in err, err
    finally:
        if victim:
            try:
                os.kill(victim, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if launcher.poll() is None:
            launcher.kill()
