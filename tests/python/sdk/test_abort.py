"""Engine.abort() (dst_engine_abort): frees the engine without waiting for
the other ranks. In a two-rank job where the peer has stopped answering
(SIGSTOP: alive, connections open, never closing) or has been killed, the
aborting rank returns at once, where close() (dst_engine_destroy) waits up to
comm_timeout_seconds for the peer to close too."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from sdk_support import TINY_GPT, tiny_config

import free_ports  # on sys.path through sdk_support

COMM_TIMEOUT = 4  # seconds; close() waits about this long (twice on rank 0) for a stopped peer

# One rank: train a step with the peer, say "ready", then on a line from stdin
# ("abort" or "close") tear the engine down and print how long that took.
RANK_SCRIPT = r"""
import json, sys, time
import numpy as np
import dstrain
config, model = json.loads(sys.argv[1]), json.loads(sys.argv[2])
engine = dstrain.Engine(config=config, model=model)
tokens = np.arange(32, dtype=np.int32).reshape(2, 16) % 256
engine.train_batch(tokens, (tokens + 1) % 256)
print("ready", flush=True)
command = sys.stdin.readline().strip()
start = time.monotonic()
getattr(engine, command)()
print(f"{command} took {time.monotonic() - start:.3f}", flush=True)
"""


def free_port() -> int:
    return free_ports.free_port()


def start_job(env: dict) -> list:
    config = tiny_config(train_batch_size=4, gradient_accumulation_steps=1,
                         dstrain={"num_threads": 1, "comm_timeout_seconds": COMM_TIMEOUT})
    port, token = free_port(), secrets.token_hex(8)
    ranks = []
    for rank in range(2):
        rank_env = dict(env, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                        LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        DSTRAIN_JOB_TOKEN=token)
        ranks.append(subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT, json.dumps(config), json.dumps(TINY_GPT)],
            env=rank_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    for proc in ranks:
        line = proc.stdout.readline()
        assert line == "ready\n", f"a rank did not start: {line!r} {proc.stderr.read()}"
    return ranks


def tear_down(ranks: list, failed_rank: int, how: str, command: str) -> float:
    """Stops or kills `failed_rank`, then has the other rank run `command`;
    returns the seconds the call took."""
    survivor = ranks[1 - failed_rank]
    try:
        ranks[failed_rank].send_signal(signal.SIGSTOP if how == "stopped" else signal.SIGKILL)
        if how == "killed":
            ranks[failed_rank].wait(timeout=30)
        survivor.stdin.write(command + "\n")
        survivor.stdin.flush()
        out, err = survivor.communicate(timeout=COMM_TIMEOUT * 4 + 30)
        assert survivor.returncode == 0, err
        took = float(out.split(f"{command} took ")[1])
        return took
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.communicate()


@pytest.mark.parametrize("failed_rank", [1, 0])
def test_abort_does_not_wait_for_a_stopped_peer(dst, subprocess_env, failed_rank):
    ranks = start_job(subprocess_env)
    took = tear_down(ranks, failed_rank, "stopped", "abort")
    assert took < 1.5, f"abort took {took:.1f} s with rank {failed_rank} stopped"


def test_close_waits_for_a_stopped_peer(dst, subprocess_env):
    """What abort saves: the closing handshake waits for the stopped peer."""
    ranks = start_job(subprocess_env)
    took = tear_down(ranks, 1, "stopped", "close")
    assert took >= COMM_TIMEOUT * 0.9, f"close took only {took:.1f} s"


def test_abort_after_a_peer_was_killed(dst, subprocess_env):
    ranks = start_job(subprocess_env)
    took = tear_down(ranks, 1, "killed", "abort")
    assert took < 1.5, f"abort took {took:.1f} s with rank 1 dead"


def test_abort_frees_and_is_idempotent(dst):
    engine = dst.Engine(config=tiny_config(), model=TINY_GPT)
    tokens = np.arange(64, dtype=np.int32).reshape(4, 16) % 256
    engine.train_batch(tokens, (tokens + 1) % 256)
    engine.abort()
    assert engine.closed
    engine.abort()
    engine.close()
    with pytest.raises(dst.StateError):
        engine.train_batch(tokens, (tokens + 1) % 256)
    closed = dst.Engine(config=tiny_config(), model=TINY_GPT)
    closed.close()
    closed.abort()  # a no-op after close
    assert closed.closed
    with dst.Engine(config=tiny_config(), model=TINY_GPT) as engine:
        engine.abort()  # leaving the block after an abort frees nothing twice


def test_abort_from_another_thread_stops_the_running_call(dst):
    """Engine.abort() does not wait for the lock the running call holds: the
    training thread's call raises AbortedError, abort returns after it."""
    import threading

    config = tiny_config(train_batch_size=16, train_micro_batch_size_per_gpu=2,
                         gradient_accumulation_steps=8)
    engine = dst.Engine(config=config, model=TINY_GPT)
    tokens = np.arange(256, dtype=np.int32).reshape(16, 16) % 256
    outcome = {}
    started = threading.Event()

    def train():
        try:
            for _ in range(100000):
                started.set()
                engine.train_batch(tokens, (tokens + 1) % 256)
        except dst.DstrainError as e:
            outcome["error"] = e
            outcome["at"] = time.monotonic()

    worker = threading.Thread(target=train)
    worker.start()
    started.wait(30)
    time.sleep(0.2)
    asked = time.monotonic()
    engine.abort()
    returned = time.monotonic()
    worker.join(30)
    assert isinstance(outcome.get("error"), (dst.AbortedError, dst.StateError)), outcome
    if isinstance(outcome["error"], dst.AbortedError):  # else the abort landed between calls
        assert outcome["at"] <= returned + 0.05
        assert "dst_engine_abort" in str(outcome["error"])
    assert returned - asked < 1.0
    assert engine.closed
    with pytest.raises(dst.StateError):
        engine.step
