"""The dashboard in a real headless browser (Debian's /usr/bin/chromium driven
by playwright-core from dashboard/node_modules): tests/browser/dashboard.test.mjs
loads the page, waits for the step to appear and advance, checks the charts and
the rank table, and saves a screenshot.

Two servers: dashboard/dev/mock_server.mjs (no C++ build needed; also checks
the "disconnected" banner through an API outage), and a real `dstrain train`
with the metrics HTTP server on, which serves the page embedded in the library
(needs $DSTRAIN_BUILD_DIR). Skips when chromium, node or playwright-core is
missing."""

import collections
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboard"
BROWSER_TEST = ROOT / "tests" / "browser" / "dashboard.test.mjs"
MOCK_SERVER = DASHBOARD / "dev" / "mock_server.mjs"
CHROMIUM = pathlib.Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
NODE = shutil.which("node")

BROWSER_TIMEOUT = 180  # seconds for one run of the node script (it has its own watchdog)
URL_TIMEOUT = 120      # seconds until the server prints its URL

# Small enough for fast steps on two shared cores, big enough that the run
# lives through the browser checks: it trains until the test kills it.
MODEL = {"type": "gpt", "vocab_size": 256, "n_ctx": 32, "n_layer": 2, "n_head": 4,
         "d_model": 64, "seed": 7}
STEPS = 100000
CONFIG = {
    "train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                 "warmup_num_steps": 200}},
    "gradient_clipping": 1.0,
    "steps_per_print": 2,
    "dstrain": {"monitor": {"job": "browser-test", "http": {"enabled": True, "port": 0}}},
}
TEXT = "".join(
    f"the quick brown fox {i % 7} jumps over the lazy dog number {i % 5}.\n" for i in range(400)
)


@pytest.fixture(scope="module")
def browser_ready():
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is missing (Debian package chromium; scripts/install-deps.sh)")
    if NODE is None:
        pytest.skip("node is not on PATH (scripts/install-deps.sh installs nodejs)")
    if not (DASHBOARD / "node_modules" / "playwright-core").is_dir():
        pytest.skip("dashboard/node_modules/playwright-core is missing: run "
                    "`bash scripts/install-deps.sh` (or `npm ci --prefix dashboard`)")


class Server:
    """A child process whose stdout and stderr are drained into a tail buffer;
    `wait_for(regex)` returns the first match from either stream."""

    def __init__(self, argv, env=None, cwd=None):
        self.lines = collections.deque(maxlen=400)
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(
            [str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=cwd, start_new_session=True, bufsize=1)
        self.threads = [threading.Thread(target=self._drain, args=(s,), daemon=True)
                        for s in (self.proc.stdout, self.proc.stderr)]
        for t in self.threads:
            t.start()

    def _drain(self, stream):
        for line in stream:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, pattern, timeout):
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    m = regex.search(line)
                    if m:
                        return m
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    return None
                self.cond.wait(min(remaining, 0.5))

    def tail(self, n=40):
        with self.cond:
            return "\n".join(list(self.lines)[-n:])

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=15)
        for t in self.threads:
            t.join(timeout=5)


def artifact(tmp_path, name):
    value = os.environ.get("DSTRAIN_BUILD_DIR")
    if value and pathlib.Path(value).is_dir():
        path = pathlib.Path(value) / "test-artifacts" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path / name


def run_browser_test(url, screenshot, *extra):
    try:
        result = subprocess.run(
            [NODE, str(BROWSER_TEST), url, str(screenshot), "--timeout-ms",
             str((BROWSER_TIMEOUT - 20) * 1000), *extra],
            capture_output=True, text=True, timeout=BROWSER_TIMEOUT, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the browser test did not finish in {BROWSER_TIMEOUT} s: {e.stdout} {e.stderr}")
    return result


def fetch(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.headers.get("Content-Type", ""), response.read()


def test_dashboard_against_the_mock_server(browser_ready, tmp_path):
    server = Server([NODE, MOCK_SERVER, "--port", "0", "--world", "4", "--zero", "2",
                     "--step-ms", "300", "--first-step-ms", "1500"])
    try:
        m = server.wait_for(r"mock: (http://\S+)", 30)
        assert m, f"the mock server printed no URL:\n{server.tail()}"
        screenshot = artifact(tmp_path, "dashboard-mock.png")
        # The mock's last rank is a straggler (marked "straggler +35%").
        result = run_browser_test(m.group(1), screenshot, "--outage", "--expect-stragglers", "1",
                                  "--expect-device-memory")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "dashboard.test: PASS" in result.stdout
        assert "outage banner shown and cleared" in result.stdout
        assert screenshot.stat().st_size > 10000
    finally:
        server.stop()


# On the CPU the rank table's "device mem" column shows a dash; on a device
# (the guarded stand-in of `dstrain.device "cuda"`) the bytes that live there.
@pytest.mark.parametrize("device", ["cpu", pytest.param("standin", marks=pytest.mark.test_hooks)])
def test_dashboard_served_by_a_real_training_run(browser_ready, build_dir, tmp_path, device):
    binary = build_dir / "dstrain"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(f"{binary} is missing: build the dstrain_cli target")
    config = json.loads(json.dumps(CONFIG))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("DSTRAIN_MONITOR_TOKEN", None)
    env.pop("DSTRAIN_TEST_DEVICE", None)
    if device == "standin":
        config.setdefault("dstrain", {})["device"] = "cuda"
        env["DSTRAIN_TEST_DEVICE"] = "guarded"
    (tmp_path / "model.json").write_text(json.dumps(MODEL))
    (tmp_path / "ds_config.json").write_text(json.dumps(config))
    (tmp_path / "text.txt").write_text(TEXT)
    run = Server([binary, "train", "--config", tmp_path / "ds_config.json",
                  "--model", tmp_path / "model.json", "--data", tmp_path / "text.txt",
                  "--steps", STEPS, "--eval-interval", 1000, "--eval-batches", 1],
                 env=env, cwd=tmp_path)
    try:
        m = run.wait_for(r"metrics: (http://[^\s/]+/?)", URL_TIMEOUT)
        assert m, (f"`dstrain train` printed no 'metrics: http://...' line within {URL_TIMEOUT} s "
                   f"(exit {run.proc.poll()}):\n{run.tail()}")
        url = m.group(1) if m.group(1).endswith("/") else m.group(1) + "/"

        # The page and its assets come from the library (dashboard/embed.cmake), byte for byte.
        status, ctype, body = fetch(url)
        assert status == 200 and ctype.startswith("text/html"), (status, ctype)
        stale = "(rebuild: the library embeds the dashboard files as they were at build time)"
        assert body == (DASHBOARD / "index.html").read_bytes(), f"index.html differs {stale}"
        for asset, source in [
            ("assets/app.js", DASHBOARD / "app.js"),
            ("assets/style.css", DASHBOARD / "style.css"),
            ("assets/uPlot.iife.min.js", DASHBOARD / "node_modules/uplot/dist/uPlot.iife.min.js"),
        ]:
            status, ctype, body = fetch(url + asset)
            assert status == 200, f"{asset}: HTTP {status}"
            assert body == source.read_bytes(), f"{asset} differs from {source} {stale}"

        screenshot = artifact(tmp_path, f"dashboard-{device}.png")
        result = run_browser_test(url, screenshot,
                                  *(["--expect-device-memory"] if device == "standin" else []))
        assert result.returncode == 0, (result.stdout + result.stderr +
                                        f"\n--- dstrain train (exit {run.proc.poll()}):\n{run.tail()}")
        assert "dashboard.test: PASS" in result.stdout
        assert screenshot.stat().st_size > 10000
        assert run.proc.poll() is None, f"the training run ended early:\n{run.tail()}"
    finally:
        run.stop()


def test_dashboard_of_a_pipeline_stage_draws_its_timeline(browser_ready, build_dir, tmp_path):
    """Two pipeline stages under `dstrain launch` (the seeds' Linear/ReLU
    example): a stage's page shows its last step's forward, backward and
    waiting bars."""
    binary = build_dir / "dstrain"
    examples = ROOT / "examples" / "pipeline"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("DSTRAIN_MONITOR_TOKEN", None)
    run = Server([binary, "launch", "--nproc-per-node", "2", "--", binary, "train",
                  "--config", examples / "ds_config.json", "--model",
                  examples / "linear_relu.json", "--data", "synthetic", "--steps", 100000,
                  "--eval-interval", 100000, "--metrics-port", 0], env=env, cwd=tmp_path)
    try:
        m = run.wait_for(r"metrics: (http://[^\s/]+/?)", URL_TIMEOUT)
        assert m, f"no 'metrics: http://...' line within {URL_TIMEOUT} s:\n{run.tail()}"
        url = m.group(1) if m.group(1).endswith("/") else m.group(1) + "/"
        snapshot = json.loads(fetch(url + "api/v1/snapshot")[2] or b"{}")
        result = run_browser_test(url, artifact(tmp_path, "dashboard-pipeline.png"),
                                  "--expect-timeline")
        assert result.returncode == 0, (result.stdout + result.stderr + f"\n{run.tail()}")
        assert "pipeline timeline drawn" in result.stdout, result.stdout
        assert snapshot.get("identity", {}).get("pp_rank") in (0, 1), snapshot
    finally:
        run.stop()
