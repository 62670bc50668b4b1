"""`dstrain launch` driven as a user would: the environment contract every rank
gets, the first failure reported and the other ranks stopped, signals, programs
that cannot run, and two launchers acting as two nodes.

The ranks are small Python scripts (no dstrain engine needed). Needs
$DSTRAIN_BUILD_DIR (a CMake build holding the `dstrain` binary); skips when it
is unset. Every subprocess has a timeout."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

TIMEOUT = 60  # seconds for any one launcher run
CONTRACT = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "DSTRAIN_JOB_TOKEN",
]

# A rank: records its pid, prints its contract variables as one JSON line, then
# does what its argv says for its rank: "exit:R:CODE", "kill9:R", "ignore-term",
# "sleep" (the others sleep too, so that only the launcher can end them).
RANK_SCRIPT = r"""
import json, os, pathlib, signal, sys, time
rank = int(os.environ["RANK"])
out = pathlib.Path(sys.argv[1])
partial = out / f".pid{rank}"
partial.write_text(str(os.getpid()))
partial.rename(out / f"pid{rank}")  # readers never see an empty file
names = %s
line = json.dumps({k: os.environ.get(k) for k in names} | {"argv": sys.argv[2:]}) + "\n"
os.write(1, line.encode())  # one write: lines from several ranks do not interleave


def wait_for_all_ranks():
    # Fail only once every rank has started (and recorded its pid).
    deadline = time.monotonic() + 20
    want = int(os.environ["LOCAL_WORLD_SIZE"])
    while len(list(out.glob("pid*"))) < want and time.monotonic() < deadline:
        time.sleep(0.02)


sleep = False
for action in sys.argv[2:]:
    parts = action.split(":")
    if parts[0] == "exit" and int(parts[1]) == rank:
        wait_for_all_ranks()
        time.sleep(0.2)
        sys.exit(int(parts[2]))
    if parts[0] == "kill9" and int(parts[1]) == rank:
        wait_for_all_ranks()
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    if parts[0] == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if parts[0] == "sleep":
        sleep = True
if sleep:
    time.sleep(60)
""" % repr(CONTRACT)


@pytest.fixture(scope="module")
def dstrain():
    value = os.environ.get("DSTRAIN_BUILD_DIR")
    if not value:
        pytest.skip("DSTRAIN_BUILD_DIR is not set (point it at a CMake build of dstrain)")
    binary = pathlib.Path(value) / "dstrain"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(f"{binary} is missing: build it with `cmake --build {value} --target dstrain_cli`")
    return binary


@pytest.fixture
def rank_script(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    return script


def launcher_env(token=None):
    env = {k: v for k, v in os.environ.items() if k not in CONTRACT}
    if token is not None:
        env["DSTRAIN_JOB_TOKEN"] = token
    return env


def launch(dstrain, args, program, env=None, timeout=TIMEOUT):
    return subprocess.run(
        [str(dstrain), "launch", *args, "--", *program],
        capture_output=True,
        text=True,
        env=env if env is not None else launcher_env(),
        timeout=timeout,
    )


def rank_lines(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def alive(pid):
    """True while `pid` runs (a zombie, or a pid that is gone, counts as dead)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def rank_pids(tmp_path):
    return {int(p.name[3:]): int(p.read_text()) for p in tmp_path.glob("pid*")}


def wait_until(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_help_documents_the_environment_contract(dstrain):
    result = subprocess.run(
        [str(dstrain), "launch", "--help"], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert result.returncode == 0
    for name in CONTRACT + ["--nproc-per-node", "--nnodes", "--node-rank", "--kill-timeout"]:
        assert name in result.stdout, name
    assert "failed first" in result.stdout


def test_every_rank_gets_the_contract(dstrain, rank_script, tmp_path):
    result = launch(
        dstrain,
        ["--nproc-per-node", "3", "--master-port", "29876", "--master-addr", "localhost"],
        [sys.executable, str(rank_script), str(tmp_path), "--lr", "-1", "--", "x y"],
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # the launcher is silent when all goes well
    ranks = sorted(rank_lines(result.stdout), key=lambda r: int(r["RANK"]))
    assert [r["RANK"] for r in ranks] == ["0", "1", "2"]
    for r in ranks:
        assert r["WORLD_SIZE"] == "3"
        assert r["LOCAL_RANK"] == r["RANK"]
        assert r["LOCAL_WORLD_SIZE"] == "3"
        assert r["NODE_RANK"] == "0"
        assert r["MASTER_ADDR"] == "localhost"
        assert r["MASTER_PORT"] == "29876"
        assert r["argv"] == ["--lr", "-1", "--", "x y"]  # passed on verbatim
    tokens = {r["DSTRAIN_JOB_TOKEN"] for r in ranks}
    assert len(tokens) == 1
    assert re.fullmatch(r"[0-9a-f]{32}", tokens.pop())


def test_defaults_and_an_inherited_token(dstrain, rank_script, tmp_path):
    result = launch(
        dstrain,
        ["--nproc-per-node", "2"],
        [sys.executable, str(rank_script), str(tmp_path)],
        env=launcher_env(token="shared-secret"),
    )
    assert result.returncode == 0, result.stderr
    ranks = rank_lines(result.stdout)
    assert len(ranks) == 2
    for r in ranks:
        assert r["MASTER_ADDR"] == "127.0.0.1"
        assert r["MASTER_PORT"] == "29500"
        assert r["DSTRAIN_JOB_TOKEN"] == "shared-secret"


def test_fresh_token_per_job(dstrain, rank_script, tmp_path):
    tokens = set()
    for _ in range(2):
        result = launch(dstrain, [], [sys.executable, str(rank_script), str(tmp_path)])
        assert result.returncode == 0, result.stderr
        tokens.add(rank_lines(result.stdout)[0]["DSTRAIN_JOB_TOKEN"])
    assert len(tokens) == 2


def test_a_failing_rank_is_named_and_its_status_returned(dstrain, rank_script, tmp_path):
    start = time.monotonic()
    result = launch(
        dstrain,
        ["--nproc-per-node", "3"],
        [sys.executable, str(rank_script), str(tmp_path), "exit:1:3", "sleep"],
    )
    assert result.returncode == 3, result.stderr
    assert time.monotonic() - start < 20  # the sleepers were stopped, not waited for
    pids = rank_pids(tmp_path)
    assert f"dstrain launch: rank 1 (pid {pids[1]}) failed first: exit status 3" in result.stderr
    assert "stopping the other 2 ranks" in result.stderr
    assert not any(alive(pid) for pid in pids.values())


def test_a_rank_killed_by_a_signal_stops_the_others_promptly(dstrain, rank_script, tmp_path):
    start = time.monotonic()
    result = launch(
        dstrain,
        ["--nproc-per-node", "4"],
        [sys.executable, str(rank_script), str(tmp_path), "kill9:2", "sleep"],
    )
    elapsed = time.monotonic() - start
    assert result.returncode == 128 + 9, result.stderr
    pids = rank_pids(tmp_path)
    assert (
        f"dstrain launch: rank 2 (pid {pids[2]}) failed first: killed by signal 9 (SIGKILL)"
        in result.stderr
    )
    assert elapsed < 20, f"the sleeping ranks were not terminated promptly ({elapsed:.1f} s)"
    assert "did not exit" not in result.stderr  # SIGTERM sufficed
    assert len(pids) == 4
    assert not any(alive(pid) for pid in pids.values())


def test_ranks_ignoring_sigterm_are_killed_after_the_kill_timeout(dstrain, rank_script, tmp_path):
    start = time.monotonic()
    result = launch(
        dstrain,
        ["--nproc-per-node", "2", "--kill-timeout", "1"],
        [sys.executable, str(rank_script), str(tmp_path), "ignore-term", "exit:0:7", "sleep"],
    )
    assert result.returncode == 7, result.stderr
    assert time.monotonic() - start < 20
    pids = rank_pids(tmp_path)
    assert f"rank 1 (pid {pids[1]}) did not exit within 1 s; sending SIGKILL" in result.stderr
    assert not alive(pids[1])


def test_a_missing_program_is_reported_by_name(dstrain, tmp_path):
    result = launch(dstrain, ["--nproc-per-node", "2"], [str(tmp_path / "no-such-program"), "x"])
    assert result.returncode == 127
    assert "cannot execute" in result.stderr
    assert "no-such-program" in result.stderr
    assert "No such file or directory" in result.stderr


def test_a_non_executable_program_is_reported_by_name(dstrain, tmp_path):
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho never\n")
    script.chmod(0o644)
    result = launch(dstrain, ["--nproc-per-node", "2"], [str(script)])
    assert result.returncode == 126
    assert f"cannot execute '{script}': Permission denied" in result.stderr
    assert "never" not in result.stdout


@pytest.mark.parametrize("dashes", [True, False])
def test_the_programs_arguments_pass_untouched(dstrain, tmp_path, dashes):
    """JSON and list-looking arguments, option-looking ones and empty ones
    reach every rank as written, with or without "--"."""
    script = tmp_path / "argv.py"  # a file per rank: the ranks share the launcher's stdout
    script.write_text("import json, os, sys\n"
                      f"open(os.path.join({str(tmp_path)!r}, 'argv' + os.environ['RANK']), 'w')"
                      ".write(json.dumps(sys.argv[1:]))\n")
    args = ["[1,2]", "[abc]", '{"a": [1, 2]}', "--flag", "-x", "", "a,b", "--"]
    launcher = [str(dstrain), "launch", "--nproc-per-node", "2"]
    cmd = launcher + (["--"] if dashes else []) + [sys.executable, str(script), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=launcher_env(),
                         timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    got = [json.loads((tmp_path / f"argv{rank}").read_text()) for rank in range(2)]
    assert got == [args, args], got


def test_usage_errors(dstrain):
    result = launch(dstrain, ["--nnodes", "2", "--node-rank", "2"], ["true"], env=launcher_env("t"))
    assert result.returncode == 2
    assert "--node-rank 2 must be less than --nnodes 2" in result.stderr
    result = subprocess.run(
        [str(dstrain), "launch", "--nproc-per-node", "2"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert result.returncode == 2
    assert "no program to launch" in result.stderr


def test_several_nodes_without_a_shared_token_are_refused(dstrain):
    result = launch(dstrain, ["--nnodes", "2", "--node-rank", "0"], ["true"])
    assert result.returncode == 2
    assert "DSTRAIN_JOB_TOKEN" in result.stderr
    assert "every node" in result.stderr


def test_two_launchers_as_two_nodes(dstrain, rank_script, tmp_path):
    env = launcher_env(token="two-node-token")
    nodes = []
    for node in range(2):
        out = tmp_path / f"node{node}"
        out.mkdir()
        nodes.append(
            subprocess.Popen(
                [
                    str(dstrain), "launch", "--nnodes", "2", "--node-rank", str(node),
                    "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                    "--master-port", "29877", "--", sys.executable, str(rank_script), str(out),
                ],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            )
        )
    ranks = []
    for node, process in enumerate(nodes):
        stdout, stderr = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 0, stderr
        for r in rank_lines(stdout):
            assert r["NODE_RANK"] == str(node)
            ranks.append(r)
    assert sorted(int(r["RANK"]) for r in ranks) == [0, 1, 2, 3]
    for r in ranks:
        assert r["WORLD_SIZE"] == "4"
        assert r["LOCAL_WORLD_SIZE"] == "2"
        assert int(r["RANK"]) == 2 * int(r["NODE_RANK"]) + int(r["LOCAL_RANK"])
        assert r["DSTRAIN_JOB_TOKEN"] == "two-node-token"
        assert r["MASTER_PORT"] == "29877"


def start_sleeping_job(dstrain, rank_script, tmp_path, ranks=2):
    launcher = subprocess.Popen(
        [str(dstrain), "launch", "--nproc-per-node", str(ranks), "--kill-timeout", "5", "--",
         sys.executable, str(rank_script), str(tmp_path), "sleep"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=launcher_env(),
    )
    assert wait_until(lambda: len(rank_pids(tmp_path)) == ranks, 20), "the ranks did not start"
    return launcher


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded_to_the_ranks(dstrain, rank_script, tmp_path, sig):
    launcher = start_sleeping_job(dstrain, rank_script, tmp_path)
    launcher.send_signal(sig)
    _, stderr = launcher.communicate(timeout=TIMEOUT)
    assert launcher.returncode == 128 + sig, stderr
    assert f"received {sig.name}; forwarded it to 2 running ranks" in stderr
    assert "failed first" not in stderr  # the ranks' exits are the signal's doing
    assert not any(alive(pid) for pid in rank_pids(tmp_path).values())


def test_ranks_die_with_a_killed_launcher(dstrain, rank_script, tmp_path):
    launcher = start_sleeping_job(dstrain, rank_script, tmp_path)
    launcher.kill()
    launcher.communicate(timeout=TIMEOUT)
    pids = rank_pids(tmp_path).values()
    assert wait_until(lambda: not any(alive(pid) for pid in pids), 10)
