#!/usr/bin/python3
"""Training throughput with the metrics registry + HTTP server on vs off, side
by side in one run (not a test; asserts nothing). Target: < 2% difference.

The GPT of bench_gpt.py (6 layers, d_model 384, n_ctx 256, micro-batch 8,
AdamW, fp32) on 1 rank, 1 thread, through the Python SDK (sdk-python/src,
libdstrain from the build). Runs alternate "off" (no "dstrain.monitor") and
"on" ("dstrain.monitor.http" enabled on a free port) in ABBA order over the
rounds, each run a fresh engine: warm-up steps, then timed train_batch steps on
the same random tokens. While "on", a background thread GETs /metrics every
second, as a Prometheus with scrape_interval 1s would.

    /usr/bin/python3 bench/bench_metrics.py [--build-dir build] [--rounds 3]
        [--steps 6] [--warmup 2] [--quick]
"""

import argparse
import os
import pathlib
import re
import statistics
import sys
import threading
import time
import urllib.request

# One thread everywhere; BLAS / OpenMP pools are sized when the libraries load.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "DSTRAIN_NUM_THREADS"):
    os.environ[_var] = "1"

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import bench_gpt  # noqa: E402  (MODEL, MICRO_BATCH, ADAMW, ds_config)

SCRAPE_INTERVAL = 1.0  # seconds, like a Prometheus scrape_interval of 1s


def find_build_dir(arg):
    candidates = [arg] if arg else []
    if os.environ.get("DSTRAIN_BUILD_DIR"):
        candidates.append(os.environ["DSTRAIN_BUILD_DIR"])
    candidates.append(str(REPO / "build"))
    for c in candidates:
        p = pathlib.Path(c).resolve()
        if any(p.glob("libdstrain.so*")):
            return p
    sys.exit("bench_metrics.py: no build with libdstrain.so found (tried "
             + ", ".join(candidates) + "); pass --build-dir BUILD")


def config(monitor_on):
    cfg = bench_gpt.ds_config(1)  # "dstrain": {"num_threads": 1}
    if monitor_on:
        cfg["dstrain"]["monitor"] = {"job": "bench-metrics",
                                     "http": {"enabled": True, "port": 0}}
    return cfg


class Scraper(threading.Thread):
    """GETs `url` every SCRAPE_INTERVAL seconds until stopped; counts scrapes,
    failures and the slowest answer."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.stop_event = threading.Event()
        self.ok = 0
        self.failed = 0
        self.errors = []
        self.max_latency = 0.0
        self.bytes = 0

    def run(self):
        while not self.stop_event.is_set():
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    body = response.read()
                if response.status == 200 and b"dstrain_steps_total" in body:
                    self.ok += 1
                    self.bytes = len(body)
                else:
                    self.failed += 1
                    self.errors.append(f"HTTP {response.status}, {len(body)} bytes")
            except OSError as e:
                self.failed += 1
                self.errors.append(repr(e))
            latency = time.perf_counter() - start
            self.max_latency = max(self.max_latency, latency)
            self.stop_event.wait(max(0.0, SCRAPE_INTERVAL - latency))

    def stop(self):
        self.stop_event.set()
        self.join(timeout=10)


def one_run(dstrain, monitor_on, x, y, warmup, steps):
    """Step times (s) of the timed steps, and the scraper's report when on."""
    report = None
    with dstrain.Engine(config=config(monitor_on), model=bench_gpt.MODEL) as engine:
        url = engine.monitor_url()
        if monitor_on and not url:
            sys.exit("bench_metrics.py: the monitor is on but the engine reports no URL")
        if not monitor_on and url:
            sys.exit(f"bench_metrics.py: the monitor is off but the engine serves {url}")
        for _ in range(warmup):
            engine.train_batch(x, y)
        scraper = Scraper(url + "metrics") if monitor_on else None
        if scraper:
            scraper.start()
        times = []
        try:
            for _ in range(steps):
                start = time.perf_counter()
                engine.train_batch(x, y)
                times.append(time.perf_counter() - start)
        finally:
            if scraper:
                scraper.stop()
        if scraper:
            # The counter seen by a scrape after the run equals the steps taken.
            with urllib.request.urlopen(url + "metrics", timeout=5) as response:
                text = response.read().decode()
            m = re.search(r"^dstrain_steps_total\{[^}]*\} (\S+)$", text, re.M)
            report = {"ok": scraper.ok, "failed": scraper.failed, "errors": scraper.errors[:3],
                      "max_latency": scraper.max_latency, "bytes": scraper.bytes,
                      "steps_total": float(m.group(1)) if m else None}
    return times, report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build-dir", help="CMake build dir (default: $DSTRAIN_BUILD_DIR, ./build)")
    ap.add_argument("--rounds", type=int, help="runs of each mode (default 3; quick 2)")
    ap.add_argument("--steps", type=int, help="timed steps per run (default 6; quick 3)")
    ap.add_argument("--warmup", type=int, help="warm-up steps per run (default 2; quick 1)")
    ap.add_argument("--quick", action="store_true", help="short run (about a minute)")
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    steps = args.steps or (3 if args.quick else 6)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)

    build = find_build_dir(args.build_dir)
    os.environ["DSTRAIN_BUILD_DIR"] = str(build)
    sys.path.insert(0, str(REPO / "sdk-python" / "src"))
    import numpy as np

    import dstrain

    model = bench_gpt.MODEL
    tokens_per_step = bench_gpt.MICRO_BATCH * model["n_ctx"]
    rng = np.random.default_rng(1)
    stream = rng.integers(0, model["vocab_size"], tokens_per_step + 1, dtype=np.int32)
    x = stream[:-1].reshape(bench_gpt.MICRO_BATCH, model["n_ctx"])
    y = stream[1:].reshape(bench_gpt.MICRO_BATCH, model["n_ctx"])

    print(f"GPT {model['n_layer']}L x {model['d_model']} ({model['n_head']} heads), n_ctx "
          f"{model['n_ctx']}, micro-batch {bench_gpt.MICRO_BATCH} ({tokens_per_step} tokens/step), "
          f"AdamW, fp32, 1 rank, 1 thread; dstrain {dstrain.version()} from {build}")
    print(f"{rounds} rounds x (off, on) in ABBA order, {warmup} warm-up + {steps} timed steps "
          f"per run; 'on' = dstrain.monitor.http + GET /metrics every {SCRAPE_INTERVAL:g} s")
    print(f"{'round':>5} {'mode':>4} {'tok/s':>9} {'median step s':>14}  scrapes")

    results = {False: [], True: []}  # monitor_on -> [(tokens/s, step times)]
    round_ratios = []
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        this_round = {}
        for on in order:
            times, report = one_run(dstrain, on, x, y, warmup, steps)
            tps = tokens_per_step * len(times) / sum(times)
            results[on].append((tps, times))
            this_round[on] = tps
            note = ""
            if report:
                note = (f"{report['ok']} ok, {report['failed']} failed, slowest "
                        f"{report['max_latency'] * 1e3:.1f} ms, {report['bytes']} bytes; "
                        f"steps_total {report['steps_total']:g} (expected {warmup + steps})")
                if report["errors"]:
                    note += f"; errors: {report['errors']}"
            print(f"{r + 1:>5} {'on' if on else 'off':>4} {tps:>9.1f} "
                  f"{statistics.median(times):>14.4f}  {note}", flush=True)
        round_ratios.append(this_round[True] / this_round[False])

    def summary(on):
        tps = [t for t, _ in results[on]]
        steps_all = [s for _, times in results[on] for s in times]
        return statistics.mean(tps), min(tps), max(tps), statistics.median(steps_all)

    off_mean, off_min, off_max, off_median_step = summary(False)
    on_mean, on_min, on_max, on_median_step = summary(True)
    ratio = on_mean / off_mean
    print()
    print(f"off: {off_mean:9.1f} tok/s (runs {off_min:.1f} .. {off_max:.1f}), "
          f"median step {off_median_step:.4f} s")
    print(f"on:  {on_mean:9.1f} tok/s (runs {on_min:.1f} .. {on_max:.1f}), "
          f"median step {on_median_step:.4f} s")
    print(f"on/off throughput ratio {ratio:.4f} ({(ratio - 1) * 100:+.2f}%); per-round ratios "
          f"{', '.join(f'{q:.4f}' for q in round_ratios)} (spread {min(round_ratios):.4f} .. "
          f"{max(round_ratios):.4f}); from the median step times "
          f"{off_median_step / on_median_step:.4f}")
    verdict = "within" if abs(ratio - 1) < 0.02 else "OUTSIDE"
    print(f"target |on/off - 1| < 2%: {verdict} "
          f"(run-to-run spread of 'off' alone: {(off_max - off_min) / off_mean * 100:.2f}%)")


if __name__ == "__main__":
    main()
