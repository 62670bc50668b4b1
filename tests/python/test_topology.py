"""communication.topology on four ranks: "ring" (Gloo's ring all-reduce),
"hierarchical" (two "nodes" of two ranks: reduce within each, all-reduce
between the leaders, broadcast back) and 3 reproduce the default ("tree",
halving-doubling) and the single rank at ZeRO 0 and 1, with the same
gradient bytes counted; the hierarchical job connects its node and leader
groups."""
import json
import os
import secrets
import subprocess

import pytest

import test_data_parallel as dp_tests
from test_data_parallel import tool  # noqa: F401  (the fixture)

STEPS = 6


def run(tmp_path, tool, stage, topology, world=4, per_node=4):
    cfg, model = dp_tests.write_job(tmp_path, stage, 2, 4 // world, world,
                                    f"t{stage}{topology}{world}", overlap=True, bucket=5000)
    if topology is not None:
        config = json.loads(cfg.read_text())
        config["communication"] = {"topology": topology}
        cfg.write_text(json.dumps(config))
    port, token = dp_tests.free_port(), secrets.token_hex(8)
    procs = []
    for rank in range(world):
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   DSTRAIN_LOG_LEVEL="debug")
        if world > 1:
            env.update({"RANK": str(rank), "WORLD_SIZE": str(world),
                        "LOCAL_RANK": str(rank % per_node), "LOCAL_WORLD_SIZE": str(per_node),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                        "DSTRAIN_JOB_TOKEN": token})
        procs.append(subprocess.Popen(
            [tool, "--model", str(model), "--config", str(cfg), "--steps", str(STEPS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=dp_tests.TIMEOUT)
        assert p.returncode == 0, err
        outs.append((json.loads(out.strip().splitlines()[-1]), err))
    return outs


@pytest.mark.parametrize("stage", [0, 1])
def test_every_topology_reproduces_tree_and_the_single_rank(tmp_path, tool, stage):
    single = run(tmp_path, tool, 0, None, world=1)[0][0]["losses"]
    tree = run(tmp_path, tool, stage, None)
    op = "allreduce" if stage == 0 else "reduce"
    for topology, per_node in (("ring", 4), ("hierarchical", 2), (3, 4)):
        outs = run(tmp_path, tool, stage, topology, per_node=per_node)
        for (r, err), (t, _) in zip(outs, tree):
            assert dp_tests.relative_gap(r["losses"], t["losses"]) <= 1e-5, topology
            assert dp_tests.relative_gap(r["losses"], single) <= 1e-5, topology
            assert r["metrics"]["comm"][op]["bytes"] == t["metrics"]["comm"][op]["bytes"]
        if topology == "hierarchical":
            logs = "".join(err for _, err in outs)
            for group in ("dp_local[0,1]", "dp_local[2,3]", "dp_leaders[0,2]"):
                assert f"{group} connected" in logs, group
        else:
            assert "dp_leaders" not in "".join(err for _, err in outs)
        ring = all("dp[0,1,2,3] connected (ring sums)" in err for _, err in outs)
        assert ring == (topology == "ring"), topology


def test_a_rank_killed_inside_a_hierarchical_sum_is_named(tmp_path, tool):
    """Rank 1 (node 0's second rank) dies mid-training under "hierarchical":
    every survivor — its node leader waiting in the node's reduce, the other
    node waiting among the leaders or in its own node — exits within the
    timeout naming rank 1 (lost, or stalled when its heartbeats stop first)."""
    import signal
    import time

    import test_faults as faults
    cfg, model = faults.job_files(tmp_path, 4)
    config = json.loads(cfg.read_text())
    config["communication"] = {"topology": "hierarchical"}
    cfg.write_text(json.dumps(config))
    port, token = dp_tests.free_port(), secrets.token_hex(8)
    procs = []
    for rank in range(4):
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", RANK=str(rank),
                   WORLD_SIZE="4", LOCAL_RANK=str(rank % 2), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DSTRAIN_JOB_TOKEN=token)
        procs.append(subprocess.Popen(
            [tool, "--model", str(model), "--config", str(cfg), "--steps", "100000",
             "--progress", "1"], env=env, text=True, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE))
    try:
        faults.wait_for_progress(procs[0])
        killed_at = time.monotonic()
        procs[1].send_signal(signal.SIGKILL)
        for rank in (0, 2, 3):
            _, err = procs[rank].communicate(timeout=faults.COMM_TIMEOUT + 30)
            elapsed = time.monotonic() - killed_at
            assert procs[rank].returncode != 0, f"rank {rank} survived silently"
            assert elapsed < faults.COMM_TIMEOUT + 10, f"rank {rank} took {elapsed:.0f} s"
            # Named as lost (its store connection closed) or, when its heartbeats
            # stop first on a loaded machine, as stalled: rank 1 either way.
            assert "rank 1 died first" in err or "rank 1 has stalled" in err, \
                f"rank {rank}:\n{err}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
