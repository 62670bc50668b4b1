"""dst_engine_abort gets a rank out of a collective that will never complete,
from a watchdog thread, as ncclCommAbort does; the ranks that wait on the
aborted one are told it aborted.

The C programs are examples/c/abort_on_signal.c (the documented pattern: the
SIGINT/SIGTERM handler only posts a semaphore, a watchdog thread calls
dst_engine_abort); the Python ones use Engine.abort() from the main thread's
signal handler while a worker thread trains. In every job one rank stops
calling after two steps (--stall-after 2: a peer that stopped answering, alive
and connected), so the others block in step 2's all-reduce until the signal.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import free_ports

REPO = Path(__file__).resolve().parents[2]
STALL_SECONDS = 6


def example(build_dir: Path) -> Path:
    path = build_dir / "tests" / "examples" / "c" / "abort_on_signal"
    if not path.exists():
        pytest.fail(f"{path} is missing: build the example_c_abort_on_signal target")
    return path


def start_ranks(commands: list, env: dict) -> list:
    port, token = free_ports.free_port(), secrets.token_hex(8)
    world = len(commands)
    ranks = []
    for rank, command in enumerate(commands):
        rank_env = dict(env, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                        LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port), DSTRAIN_JOB_TOKEN=token,
                        OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        ranks.append(subprocess.Popen(command, env=rank_env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return ranks


def read_until(proc: subprocess.Popen, pattern: str, timeout: float) -> str:
    """Lines of `proc` up to the first matching `pattern` (fails after `timeout`)."""
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if re.search(pattern, line):
            return seen
    pytest.fail(f"no line matching {pattern!r} within {timeout} s; output so far:\n{seen}")


def finish(proc: subprocess.Popen, timeout: float) -> str:
    out, _ = proc.communicate(timeout=timeout)
    return out


def stop_all(ranks: list) -> None:
    for proc in ranks:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def c_job(build_dir: Path, world: int, stalled: int, env: dict) -> list:
    program = str(example(build_dir))
    commands = [[program] + (["--stall-after", "2", "--stall-seconds", str(STALL_SECONDS)]
                             if rank == stalled else []) for rank in range(world)]
    return start_ranks(commands, env)


def aborted_within(out: str) -> float:
    match = re.search(r"returned DST_ERR_ABORTED (\d+) ms after the abort", out)
    assert match, out
    return int(match.group(1)) / 1000.0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_rank_blocked_on_a_stopped_peer_returns_aborted_within_a_second(build_dir, sig):
    """Rank 1 waits in step 2's all-reduce for rank 0, which stopped calling;
    a signal to rank 1 ends that call within a second. Rank 0, coming back,
    is told that rank 1 aborted."""
    ranks = c_job(build_dir, 2, stalled=0, env=dict(os.environ))
    try:
        read_until(ranks[0], r"rank 0: stalling", 60)
        read_until(ranks[1], r"rank 1: step 2", 30)
        time.sleep(0.5)  # in the all-reduce now
        ranks[1].send_signal(sig)
        out1 = finish(ranks[1], 10)
        assert ranks[1].returncode == 130, out1
        assert f"signal {int(sig)}: aborting" in out1, out1
        assert aborted_within(out1) < 1.0, out1
        out0 = finish(ranks[0], STALL_SECONDS + 30)
        assert ranks[0].returncode == 1, out0
        assert "rank 0: step 2 failed: communication error" in out0, out0
        assert "rank 1 aborted" in out0, out0
    finally:
        stop_all(ranks)


def test_the_ranks_waiting_on_an_aborted_rank_are_told_within_a_second(build_dir):
    """Three ranks; rank 2 stopped calling, ranks 0 and 1 wait in the same
    all-reduce. Rank 1 aborts: rank 0, still waiting, fails at once naming
    rank 1's abort (its heartbeat says so), without waiting for the timeout."""
    ranks = c_job(build_dir, 3, stalled=2, env=dict(os.environ))
    try:
        read_until(ranks[2], r"rank 2: stalling", 60)
        read_until(ranks[0], r"rank 0: step 2", 30)
        read_until(ranks[1], r"rank 1: step 2", 30)
        time.sleep(0.5)
        sent = time.monotonic()
        ranks[1].send_signal(signal.SIGINT)
        out0 = read_until(ranks[0], r"step 2 failed", 10)
        told_after = time.monotonic() - sent
        assert "rank 1 aborted" in out0, out0
        assert told_after < 2.0, f"rank 0 was told after {told_after:.1f} s:\n{out0}"
        out1 = finish(ranks[1], 10)
        assert ranks[1].returncode == 130 and aborted_within(out1) < 1.0, out1
    finally:
        stop_all(ranks)


def test_rank_0_which_hosts_the_store_aborts_within_a_second(build_dir):
    """Rank 0 hosts the rendezvous store; its abort is as quick, and rank 1,
    coming back from its stall, fails naming rank 0 instead of hanging."""
    ranks = c_job(build_dir, 2, stalled=1, env=dict(os.environ))
    try:
        read_until(ranks[1], r"rank 1: stalling", 60)
        read_until(ranks[0], r"rank 0: step 2", 30)
        time.sleep(0.5)
        ranks[0].send_signal(signal.SIGINT)
        out0 = finish(ranks[0], 10)
        assert ranks[0].returncode == 130 and aborted_within(out0) < 1.0, out0
        out1 = finish(ranks[1], STALL_SECONDS + 60)
        assert ranks[1].returncode == 1, out1
        assert "rank 1: step 2 failed" in out1 and "rank 0" in out1, out1
    finally:
        stop_all(ranks)


# The Python pattern: the main thread's signal handler calls Engine.abort()
# while a worker thread trains (a handler runs only between bytecodes, never
# while the main thread is inside a library call).
RANK_SCRIPT = r"""
import json, signal, sys, threading, time
import numpy as np
import dstrain
stall = sys.argv[1] == "stall"
engine = dstrain.Engine(config={"train_batch_size": 4, "dstrain": {"num_threads": 1}},
                        model={"type": "gpt", "vocab_size": 256, "n_ctx": 16, "n_layer": 1,
                               "n_head": 2, "d_model": 16, "seed": 5})
tokens = np.arange(32, dtype=np.int32).reshape(2, 16) % 256
result = {}

def train():
    try:
        for step in range(100000):
            if stall and step == 2:
                print("stalling", flush=True)
                time.sleep(STALL_SECONDS)
            print(f"step {step}", flush=True)
            engine.train_batch(tokens, (tokens + 1) % 256)
    except dstrain.AbortedError as e:
        result["aborted"] = time.monotonic()
        result["message"] = str(e)
    except dstrain.DstrainError as e:
        result["failed"] = f"{type(e).__name__}: {e}"

def on_signal(sig, frame):
    result["signal"] = time.monotonic()
    engine.abort()

worker = threading.Thread(target=train)
worker.start()
signal.signal(signal.SIGINT, on_signal)
while worker.is_alive():
    worker.join(0.2)
if "aborted" in result:
    print(f"aborted {result['aborted'] - result['signal']:.3f} s after the signal: "
          f"{result['message']}", flush=True)
    print(f"closed {engine.closed}", flush=True)
    sys.exit(130)
print(f"failed {result.get('failed')}", flush=True)
sys.exit(1)
""".replace("STALL_SECONDS", str(STALL_SECONDS))


def test_the_python_sdk_aborts_a_training_thread_from_a_signal_handler(build_dir):
    env = dict(os.environ, DSTRAIN_BUILD_DIR=str(build_dir),
               PYTHONPATH=str(REPO / "sdk-python" / "src"))
    ranks = start_ranks([[sys.executable, "-c", RANK_SCRIPT, "stall"],
                         [sys.executable, "-c", RANK_SCRIPT, "train"]], env)
    try:
        read_until(ranks[0], r"stalling", 60)
        read_until(ranks[1], r"step 2", 30)
        time.sleep(0.5)
        ranks[1].send_signal(signal.SIGINT)
        out1 = finish(ranks[1], 10)
        assert ranks[1].returncode == 130, out1
        match = re.search(r"aborted ([0-9.]+) s after the signal", out1)
        assert match and float(match.group(1)) < 1.0, out1
        assert "closed True" in out1, out1
        out0 = finish(ranks[0], STALL_SECONDS + 30)
        assert ranks[0].returncode == 1 and "CommError" in out0 and "rank 1 aborted" in out0, out0
    finally:
        stop_all(ranks)
