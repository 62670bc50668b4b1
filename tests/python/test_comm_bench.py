"""`dstrain comm-bench` (and the SDK's `comm_bench`) under `dstrain launch`:
every collective over message sizes with nccl-tests' busbw factors and no
wrong elements, the tp group of a 2 x 2 layout, the same report on every rank
through the Python SDK, and named errors for a one-rank job and a bad
operation."""
import json
import os
import pathlib
import subprocess
import sys

import test_cli as cli_tests
from test_cli import dstrain  # noqa: F401  (fixture)
import test_data_parallel as dp_tests

SDK_SRC = pathlib.Path(__file__).resolve().parents[2] / "sdk-python" / "src"
BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1,
              "reduce": lambda n: 1, "sendrecv": lambda n: 1}


def launch(binary, ranks, *args):
    return cli_tests.run(binary, "launch", "--nproc-per-node", ranks, "--master-port",
                         dp_tests.free_port(), "--", binary, *args)


def check_rows(report, ranks, ops, sizes):
    assert report["ranks"] == ranks and report["backend"] == "gloo"
    got = [(r["op"], r["bytes"]) for r in report["rows"]]
    assert got == [(op, b) for op in ops for b in sizes], got
    for r in report["rows"]:
        assert r["errors"] == 0, r
        assert r["time_us"] > 0
        assert abs(r["algbw_GBps"] - r["bytes"] / r["time_us"] / 1e3) <= 1e-6 * r["algbw_GBps"]
        factor = BUS_FACTOR[r["op"]](ranks)
        assert abs(r["busbw_GBps"] - r["algbw_GBps"] * factor) <= 1e-9 + 1e-6 * r["busbw_GBps"]


def test_every_collective_on_two_ranks(dstrain):  # noqa: F811
    out = launch(dstrain, 2, "comm-bench", "--json", "-b", "1000", "-e", "100000", "-f", "10",
                 "-n", "3")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, out.stdout  # rank 0 prints
    check_rows(json.loads(lines[0]), 2, list(BUS_FACTOR), [1000, 10000, 100000])
    table = launch(dstrain, 2, "comm-bench", "--ops", "allreduce,sendrecv", "-e", "65536",
                   "-n", "2")
    assert table.returncode == 0, table.stderr
    assert "busbw (GB/s)" in table.stdout and "#wrong" in table.stdout
    rows = [line.split() for line in table.stdout.splitlines() if line[:1].isalpha()]
    assert [r[0] for r in rows if r[0] != "op"] == ["allreduce"] * 3 + ["sendrecv"] * 3


def test_the_tp_group_of_a_two_by_two_layout(dstrain, tmp_path):  # noqa: F811
    config = tmp_path / "tp.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1,
                                  "tensor_parallel": {"tp_size": 2}}))
    out = launch(dstrain, 4, "comm-bench", "--config", config, "--group", "tp", "--ops",
                 "allreduce,allgather", "-b", "4096", "-e", "4096", "-n", "2", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["group"] == "tp"
    check_rows(report, 2, ["allreduce", "allgather"], [4096])


def test_the_python_sdk_reports_the_same_on_every_rank(dstrain, tmp_path):  # noqa: F811
    script = tmp_path / "bench.py"
    script.write_text(
        "import json, os, sys\n"
        "import dstrain\n"
        "report = dstrain.comm_bench(None, ops=['reduce_scatter', 'broadcast'],\n"
        "                            min_bytes=512, max_bytes=2048, factor=2, iters=2)\n"
        "path = os.path.join(sys.argv[1], 'rank%s.json' % os.environ['RANK'])\n"
        "open(path, 'w').write(json.dumps(report))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(SDK_SRC), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [str(dstrain), "launch", "--nproc-per-node", "2", "--master-port",
         str(dp_tests.free_port()), "--", sys.executable, str(script), str(tmp_path)],
        capture_output=True, text=True, timeout=cli_tests.TIMEOUT, env=env)
    assert out.returncode == 0, out.stderr
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert reports[0] == reports[1]
    check_rows(reports[0], 2, ["reduce_scatter", "broadcast"], [512, 1024, 2048])


def test_errors_are_named(dstrain):  # noqa: F811
    alone = cli_tests.run(dstrain, "comm-bench")
    assert alone.returncode != 0
    assert "one rank" in alone.stderr and "dstrain launch" in alone.stderr, alone.stderr
    bad = launch(dstrain, 2, "comm-bench", "--ops", "allreduce,all_reduce")
    assert bad.returncode != 0
    assert '"all_reduce"' in bad.stderr and "reduce_scatter" in bad.stderr, bad.stderr
