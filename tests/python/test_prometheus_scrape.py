"""The metrics HTTP server as a real Prometheus sees it: a 2-rank `dstrain
train` under `dstrain launch` with "dstrain.monitor.http" on a free base port P
(rank R listens on P + R), a Debian /usr/bin/prometheus started on loopback
with a generated config that scrapes both ranks every second, and PromQL
queries over Prometheus's HTTP API (/api/v1/query): `up`, the step counter,
the memory gauge and a rate over the token counter, for rank 0 and rank 1.
A second test pipes each live rank's /metrics into `promtool check metrics`.

One training job serves both tests (module fixture); it is killed at the end.
Needs $DSTRAIN_BUILD_DIR; skips when prometheus / promtool are missing
(Debian package prometheus)."""

import json
import os
import pathlib
import re
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

import free_ports

from test_dashboard_browser import Server  # child process with drained output, killpg on stop

PROMETHEUS = pathlib.Path(os.environ.get("PROMETHEUS_PATH", "/usr/bin/prometheus"))
PROMTOOL = pathlib.Path(os.environ.get("PROMTOOL_PATH", "/usr/bin/promtool"))

JOB = "prom-scrape-test"        # dstrain.monitor.job: the `job` label of every series
SCRAPE_JOB = "dstrain-ranks"     # Prometheus's job_name (the `up` series carry it)
URL_TIMEOUT = 60                 # seconds until both ranks print their metrics URL
READY_TIMEOUT = 30               # seconds until Prometheus answers /-/ready
QUERY_TIMEOUT = 30               # seconds until a PromQL query returns what is expected
TOOL_TIMEOUT = 30                # seconds for one promtool call

# Tiny GPT on 2 shared cores: ~10-20 ms a step, so 3000 steps last ~30-60 s,
# longer than the tests need (they kill it); bounded so that a job orphaned by
# a killed pytest still ends by itself.
STEPS = 3000
MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 32, "n_layer": 2, "n_head": 4,
         "d_model": 64, "seed": 7}
TEXT = "".join(
    f"the quick brown fox {i % 7} jumps over the lazy dog number {i % 5}.\n" for i in range(400)
)


def config(base_port):
    return {
        "train_batch_size": 16,
        "train_micro_batch_size_per_gpu": 8,  # x 2 ranks
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
        "gradient_clipping": 1.0,
        "steps_per_print": 50,
        "zero_optimization": {"stage": 0},
        "dstrain": {"num_threads": 1,
                    "monitor": {"job": JOB, "http": {"enabled": True, "port": base_port}}},
    }


def free_port_pair():
    """P with P and P + 1 free (free_ports: below the ephemeral range)."""
    return free_ports.free_port(2)


def free_port():
    return free_ports.free_port()


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode()


def wait_until(probe, timeout, what, context=lambda: ""):
    """Calls probe() until it returns (True, value); fails after `timeout` s
    with the last value seen and context()."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            done, last = probe()
        except OSError as e:  # connection refused / reset while a server starts
            done, last = False, repr(e)
        if done:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s; last seen: {last}\n{context()}")
        time.sleep(0.25)


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prometheus_binary():
    if not (PROMETHEUS.is_file() and os.access(PROMETHEUS, os.X_OK)):
        pytest.skip(f"{PROMETHEUS} is missing (Debian package prometheus)")
    return PROMETHEUS


@pytest.fixture(scope="module")
def promtool_binary():
    if not (PROMTOOL.is_file() and os.access(PROMTOOL, os.X_OK)):
        pytest.skip(f"{PROMTOOL} is missing (Debian package prometheus)")
    return PROMTOOL


class Job:
    def __init__(self, server, ports):
        self.server = server
        self.ports = ports  # rank -> metrics port

    def metrics_url(self, rank):
        return f"http://127.0.0.1:{self.ports[rank]}/metrics"

    def context(self):
        return f"--- dstrain launch (exit {self.server.proc.poll()}):\n{self.server.tail()}"

    def require_running(self):
        assert self.server.proc.poll() is None, (
            f"the training job ended before the checks were done (raise STEPS)\n{self.context()}")


@pytest.fixture(scope="module")
def training_job(build_dir, tmp_path_factory):
    """A 2-rank job with the metrics server on base port P; yields a Job whose
    ports are {0: P, 1: P + 1} as printed by the ranks."""
    binary = build_dir / "dstrain"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(f"{binary} is missing: build the dstrain_cli target")
    tmp = tmp_path_factory.mktemp("prom_job")
    base = free_port_pair()
    (tmp / "model.json").write_text(json.dumps(MODEL))
    (tmp / "ds_config.json").write_text(json.dumps(config(base)))
    (tmp / "text.txt").write_text(TEXT)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("DSTRAIN_MONITOR_TOKEN", None)  # no bearer token: Prometheus scrapes without one
    server = Server([binary, "launch", "--nproc-per-node", 2, "--master-port", free_port(),
                     "--kill-timeout", 10, "--",
                     binary, "train", "--config", tmp / "ds_config.json",
                     "--model", tmp / "model.json", "--data", tmp / "text.txt",
                     "--steps", STEPS, "--eval-interval", 100000, "--eval-batches", 1],
                    env=env, cwd=tmp)
    try:
        job = Job(server, {})
        for rank in (0, 1):
            m = server.wait_for(rf"rank {rank} metrics: http://127\.0\.0\.1:(\d+)/ \(dashboard\), "
                                rf"http://127\.0\.0\.1:(\d+)/metrics \(Prometheus\)", URL_TIMEOUT)
            assert m, (f"rank {rank} printed no 'metrics: http://...' line within {URL_TIMEOUT} s\n"
                       f"{job.context()}")
            assert m.group(1) == m.group(2), m.group(0)
            job.ports[rank] = int(m.group(1))
        # The documented contract: a rank listens on the base port + LOCAL_RANK.
        assert job.ports == {0: base, 1: base + 1}, (base, job.ports)
        yield job
    finally:
        server.stop()


@pytest.fixture
def prometheus(prometheus_binary, training_job, tmp_path):
    """A Prometheus server on 127.0.0.1:<free port> scraping both ranks every
    second; yields its base URL."""
    port = free_port()
    targets = [f"127.0.0.1:{training_job.ports[r]}" for r in (0, 1)]
    # JSON is YAML: no PyYAML needed. honor_labels keeps the exposition's own
    # `job` label (otherwise renamed exported_job).
    (tmp_path / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{
            "job_name": SCRAPE_JOB,
            "honor_labels": True,
            "metrics_path": "/metrics",
            "static_configs": [{"targets": targets}],
        }],
    }, indent=1))
    (tmp_path / "tsdb").mkdir()
    server = Server([prometheus_binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                     f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{port}",
                     "--storage.tsdb.retention.time=1h", "--log.level=warn"], cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready():
            assert server.proc.poll() is None, (
                f"prometheus exited with {server.proc.poll()}:\n{server.tail()}")
            status, body = http_get(url + "/-/ready")
            return status == 200, body
        wait_until(ready, READY_TIMEOUT, "prometheus /-/ready", server.tail)
        yield url, server
    finally:
        server.stop()


def promql(url, query):
    """The result vector of an instant query: [(labels, float value), ...]."""
    status, body = http_get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
    answer = json.loads(body)
    assert status == 200 and answer.get("status") == "success", (query, body)
    assert answer["data"]["resultType"] == "vector", (query, body)
    return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]


def by_rank(result):
    return {series["rank"]: (series, value) for series, value in result if "rank" in series}


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------


def test_prometheus_scrapes_both_ranks(training_job, prometheus):
    url, prom = prometheus
    job = training_job
    instance = {str(r): f"127.0.0.1:{job.ports[r]}" for r in (0, 1)}

    def context():
        return f"--- prometheus:\n{prom.tail()}\n{job.context()}"

    def query_until(query, check, what):
        """Polls `query` until check(result) holds; returns the result."""
        def probe():
            result = promql(url, query)
            return check(result), result
        return wait_until(probe, QUERY_TIMEOUT, f"{what} ({query})", context)

    # Both targets scraped successfully.
    up = query_until(f'up{{job="{SCRAPE_JOB}"}}',
                     lambda r: len(r) == 2 and all(v == 1 for _, v in r), "both targets up")
    assert sorted(s["instance"] for s, _ in up) == sorted(instance.values()), up

    # One step counter per rank, with the rank's identity labels, from the
    # rank's own port, and advancing.
    steps = query_until(f'dstrain_steps_total{{job="{JOB}"}}',
                        lambda r: sorted(by_rank(r)) == ["0", "1"] and all(v > 0 for _, v in r),
                        "a positive step counter for rank 0 and rank 1")
    assert len(steps) == 2, steps
    for rank, (series, value) in by_rank(steps).items():
        assert series["instance"] == instance[rank], (rank, series)
        assert series["dp_rank"] == rank, series  # pure data parallelism: dp rank = rank
        assert series["tp_rank"] == "0" and series["pp_rank"] == "0", series
        assert value == int(value), series  # a count of steps

    # Parameter memory: both ranks hold the whole model at ZeRO stage 0.
    memory = query_until(f'dstrain_memory_bytes{{job="{JOB}",category="parameters"}}',
                         lambda r: sorted(by_rank(r)) == ["0", "1"], "parameter memory per rank")
    values = {rank: value for rank, (_, value) in by_rank(memory).items()}
    assert values["0"] > 0 and values["0"] == values["1"], memory

    world = query_until(f'dstrain_world_size{{job="{JOB}"}}',
                        lambda r: sorted(by_rank(r)) == ["0", "1"], "world size per rank")
    assert all(v == 2 for _, v in world), world

    # Counters advance between scrapes: a rate over 10 s needs two samples of
    # each rank with a higher token count in the second.
    job.require_running()
    query_until(f'rate(dstrain_tokens_total{{job="{JOB}"}}[10s])',
                lambda r: sorted(by_rank(r)) == ["0", "1"] and all(v > 0 for _, v in r),
                "a positive token rate for rank 0 and rank 1")
    query_until(f'increase(dstrain_steps_total{{job="{JOB}"}}[10s]) > 0',
                lambda r: sorted(by_rank(r)) == ["0", "1"], "steps advancing on both ranks")

    # A per-step gauge and a labelled counter made it through too.
    loss = query_until(f'dstrain_loss{{job="{JOB}"}}',
                       lambda r: sorted(by_rank(r)) == ["0", "1"], "the loss gauge of each rank")
    assert all(0 < v < 10 for _, v in loss), loss
    comm = query_until(f'dstrain_comm_bytes_total{{job="{JOB}",op="allreduce"}}',
                       lambda r: sorted(by_rank(r)) == ["0", "1"] and all(v > 0 for _, v in r),
                       "allreduce bytes of each rank")
    assert len(comm) == 2, comm
    job.require_running()


def test_live_exposition_passes_promtool(training_job, promtool_binary):
    job = training_job
    for rank in (0, 1):
        # Wait for the first step's gauges so the whole exposition is linted.
        def probe():
            status, body = http_get(job.metrics_url(rank))
            return status == 200 and re.search(r"^dstrain_loss\{", body, re.M) is not None, body
        body = wait_until(probe, QUERY_TIMEOUT, f"rank {rank} /metrics with dstrain_loss",
                          job.context)
        assert f'rank="{rank}"' in body
        try:
            result = subprocess.run([str(promtool_binary), "check", "metrics"], input=body,
                                    capture_output=True, text=True, timeout=TOOL_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"promtool check metrics did not finish in {TOOL_TIMEOUT} s: {e}")
        assert result.returncode == 0, (
            f"rank {rank}: promtool check metrics exit {result.returncode}:\n"
            f"{result.stdout}{result.stderr}\n--- exposition:\n{body}")
    job.require_running()


def test_rank0_serves_the_job_wide_table(training_job):
    """Rank 0's /api/v1/ranks lists every rank of the job with its last
    published sample (each rank writes it to the rendezvous store every
    steps_per_print steps); another rank lists only itself."""
    job = training_job
    base = job.metrics_url(0).rsplit("/", 1)[0]

    def probe():
        status, body = http_get(base + "/api/v1/ranks")
        ranks = json.loads(body)["ranks"]
        ready = status == 200 and len(ranks) == 2 and all(
            isinstance(r.get("sample"), dict) and r["sample"].get("step", 0) > 0 for r in ranks)
        return ready, ranks
    ranks = wait_until(probe, QUERY_TIMEOUT, "rank 0's table with both ranks", job.context)
    assert [r["identity"]["rank"] for r in ranks] == [0, 1]
    assert all(r["age_seconds"] is not None and r["age_seconds"] >= 0 for r in ranks)
    other = job.metrics_url(1).rsplit("/", 1)[0]
    status, body = http_get(other + "/api/v1/ranks")
    assert [r["identity"]["rank"] for r in json.loads(body)["ranks"]] == [1]
    job.require_running()
