"""A 2-node x 2-rank job across two hosts: two network namespaces joined by a
veth pair (the project's own test hosts, made and removed by this test). The
job's losses must equal the single-rank run's. Skipped, with the reason, where
network namespaces cannot be created (not root, no iproute2)."""
import json
import os
import secrets
import shutil
import subprocess

import pytest

import test_data_parallel as dp_tests

SUBNET = "10.231.{}.{}"


def sh(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to create network namespaces")
    tag = f"{os.getpid() % 100000}"
    ns = [f"dst{tag}a", f"dst{tag}b"]
    veth = [f"dv{tag}a", f"dv{tag}b"]
    octet = os.getpid() % 200 + 20
    addrs = [SUBNET.format(octet, 1), SUBNET.format(octet, 2)]
    made = sh("ip", "netns", "add", ns[0])
    if made.returncode != 0:
        pytest.skip(f"cannot create network namespaces here: {made.stderr.strip()}")
    try:
        steps = [["ip", "netns", "add", ns[1]],
                 ["ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1]]]
        for i in range(2):
            steps += [["ip", "link", "set", veth[i], "netns", ns[i]],
                      ["ip", "-n", ns[i], "addr", "add", f"{addrs[i]}/24", "dev", veth[i]],
                      ["ip", "-n", ns[i], "link", "set", veth[i], "up"],
                      ["ip", "-n", ns[i], "link", "set", "lo", "up"]]
        for cmd in steps:
            out = sh(*cmd)
            if out.returncode != 0:
                pytest.skip(f"cannot set up the test hosts ({' '.join(cmd)}): {out.stderr}")
        yield ns, addrs
    finally:
        for name in ns:
            sh("ip", "netns", "del", name)


# "hierarchical" (communication.topology): the data-parallel sums reduce
# within each host, all-reduce between the two hosts' leaders, broadcast back.
@pytest.mark.parametrize("topology", [None, "hierarchical"])
def test_two_nodes_reproduce_single_rank(tmp_path, two_hosts, build_dir, topology):
    ns, addrs = two_hosts
    tool = os.path.join(build_dir, "tests", "dst_dp_tool")
    cli = os.path.join(build_dir, "dstrain")
    single_cfg, model = dp_tests.write_job(tmp_path, 0, 2, 4, 1, "single")
    reference = dp_tests.run_ranks(tool, single_cfg, model, 1)[0]["losses"]
    cfg, _ = dp_tests.write_job(tmp_path, 1, 2, 1, 4, "two_nodes", overlap=True, bucket=5000)
    if topology:
        config = json.loads(cfg.read_text())
        config["communication"] = {"topology": topology}
        cfg.write_text(json.dumps(config))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               DSTRAIN_JOB_TOKEN=secrets.token_hex(8))
    if topology:
        env["DSTRAIN_LOG_LEVEL"] = "debug"
    port = "29611"
    nodes = [subprocess.Popen(
        ["ip", "netns", "exec", ns[node], cli, "launch", "--nnodes", "2", "--node-rank",
         str(node), "--nproc-per-node", "2", "--master-addr", addrs[0], "--master-port", port,
         "--kill-timeout", "5", "--", tool, "--model", str(model), "--config", str(cfg),
         "--steps", str(dp_tests.STEPS), "--metrics", "0"],
        env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for node in (0, 1)]
    results = []
    try:
        for node in nodes:
            out, err = node.communicate(timeout=240)
            assert node.returncode == 0, f"node failed: {err}"
            results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            if topology:  # each host's ranks, and the two hosts' leaders, made groups
                local = "dp_local[0,1]" if node is nodes[0] else "dp_local[2,3]"
                assert f"{local} connected" in err and "dp_leaders[0,2] connected" in err, err
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    for r in results:
        assert r["world_size"] == 4
        gap = dp_tests.relative_gap(r["losses"], reference)
        assert gap < 1e-5, f"rank {r['rank']} across hosts differs by {gap:.2e}"
