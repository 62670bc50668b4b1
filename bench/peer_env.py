"""The environment every bench runs PyTorch (the peer) in, so that a ratio is
what a user reproduces: PyTorch at its best on this machine.

Debian's PyTorch multiplies fp32 through the system OpenBLAS, whose speed
depends on OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE: a machine's environment may set
them (several times slower), and an OpenBLAS older than the CPU runs generic
kernels unless told the core type. So the peer runs twice: with both variables
removed, and with the best core type for this CPU; the headline ratio is
against the faster. machine_lines() says what the figures were measured on
(dstrain report's CPU line and both GEMM peaks), printed with every table.
"""

import json
import os
import pathlib
import subprocess

OPENBLAS_TUNING = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "DSTRAIN_NUM_THREADS", "MKL_NUM_THREADS")


def best_core():
    """The OpenBLAS core type whose kernels fit this CPU best."""
    info = pathlib.Path("/proc/cpuinfo").read_text()
    flags = next((line for line in info.splitlines() if line.startswith("flags")), "")
    if " avx512f" in flags:
        return "SkylakeX"
    if " avx2" in flags:
        return "Zen" if "AuthenticAMD" in info else "Haswell"
    return "Sandybridge" if " avx" in flags else None


def peer_env(threads, core=None):
    """os.environ with the threads pinned, OpenBLAS's tuning variables removed,
    and OPENBLAS_CORETYPE=core when given."""
    env = dict(os.environ)
    for key in OPENBLAS_TUNING:
        env.pop(key, None)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    for key in THREAD_VARS:
        env[key] = str(threads)
    return env


def peer_variants():
    """(label, core) for each way the peer runs: as installed (tuning variables
    removed) and with the best core type."""
    variants = [("torch", None)]
    core = best_core()
    if core:
        variants.append((f"torch (OPENBLAS_CORETYPE={core})", core))
    return variants


def cpu_model():
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def machine_lines(build, threads=1, peak=None):
    """What the figures were measured on: the CPU (dstrain report) and the fp32
    GEMM peaks of oneDNN and of the system OpenBLAS (bench/sgemm_peak's JSON,
    measured here unless the caller has it as `peak`)."""
    build = pathlib.Path(build)
    lines = []
    try:
        report = json.loads(subprocess.run([str(build / "dstrain"), "report", "--json"],
                                           capture_output=True, text=True, timeout=120).stdout)
        cpu = report["cpu"]
        features = " ".join(k for k, v in cpu["features"].items() if v)
        lines.append(f"CPU: {cpu_model()}, {cpu['cores']} cores, {features}; BLAS "
                     f"{' '.join(report['blas']['config'].split(' ')[0:2])} (core {report['blas']['core']})")
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as error:
        lines.append(f"CPU: {cpu_model()} (dstrain report failed: {error})")
    env = peer_env(threads)
    try:
        if peak is None:
            out = subprocess.run([str(build / "bench" / "sgemm_peak"), "--quick", "--json",
                                  "--threads", str(threads)], capture_output=True, text=True,
                                 timeout=600, env=env).stdout
            peak = json.loads(out.strip().splitlines()[-1])
        lines.append(f"fp32 GEMM peak on {threads} thread(s): {peak['backend']} "
                     f"{peak['peak_gflops']:.1f} GFLOP/s, OpenBLAS {peak['openblas_peak_gflops']:.1f}"
                     + (" (generic kernels)" if peak.get("openblas_generic") else "")
                     + (f", bf16 {peak['bf16_peak_gflops']:.1f}" if peak.get("bf16_peak_gflops") else ""))
    except (OSError, ValueError, IndexError, KeyError, subprocess.SubprocessError) as error:
        lines.append(f"GEMM peaks: sgemm_peak failed ({error})")
    removed = [k for k in OPENBLAS_TUNING if k in os.environ]
    lines.append("PyTorch ran with " + (", ".join(removed) + " removed from its environment"
                                        if removed else "no OpenBLAS tuning variable set")
                 + f" and again with OPENBLAS_CORETYPE={best_core()}; ratios are against the faster")
    return lines
