#!/usr/bin/python3
"""Checks that libdstrain's C ABI only grew since its baseline (docs/abi.md).

    scripts/abi-check.py [--build DIR] [--baseline FILE] [--update]

The ABI as a list of lines: every exported dst_* symbol of DIR/libdstrain.so
(nm -D), and what the C compiler makes of dstrain.h (the Rust crate's layout
probe, sdk-rust/dstrain-sys/layout_probe.c: struct sizes and alignments,
field offsets and sizes, enum sizes, constants). Against the baseline
(capi/abi/baseline.txt):
  - every symbol is still exported;
  - a struct (a type with fields) is at least as large, every field at the
    same offset with the same size, the same alignment;
  - every other size, signedness and constant is unchanged (the version
    numbers excepted);
  - anything new is allowed.
A removed function or a shrunk or reordered struct fails with the lines that
differ. --update rewrites the baseline from this build (after a release, or
when the major version changes); exit status 1 on a difference.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "sdk-rust", "dstrain-sys", "layout_probe.c")
HEADER_DIR = os.path.join(ROOT, "capi", "include")
BASELINE = os.path.join(ROOT, "capi", "abi", "baseline.txt")
VERSION_CONSTS = {"DST_VERSION_MAJOR", "DST_VERSION_MINOR", "DST_VERSION_PATCH"}


def exported_symbols(library: str) -> List[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    return sorted(n for n in names if n.startswith("dst_"))


def layout_lines() -> List[str]:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise SystemExit("abi-check: no C compiler (cc) to compile the layout probe")
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "layout_probe")
        subprocess.run([compiler, "-std=c11", "-I", HEADER_DIR, PROBE, "-o", exe], check=True,
                       timeout=120)
        out = subprocess.run([exe], capture_output=True, text=True, check=True, timeout=60)
    return [line for line in out.stdout.splitlines() if line.strip()]


def current_abi(build_dir: str) -> List[str]:
    library = os.path.join(build_dir, "libdstrain.so")
    if not os.path.exists(library):
        raise SystemExit(f"abi-check: no {library}; build the library first")
    return [f"symbol {name}" for name in exported_symbols(library)] + layout_lines()


def parse(lines: List[str]) -> Dict[str, str]:
    """'kind name value' lines (symbols: 'symbol name') keyed by 'kind name'."""
    table = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        key = " ".join(parts[:2])
        table[key] = parts[2] if len(parts) > 2 else ""
    return table


def compare(baseline: Dict[str, str], current: Dict[str, str]) -> List[str]:
    """The baseline entries the current ABI breaks, one sentence each."""
    structs = {key.split()[1].split(".")[0] for key in baseline if key.startswith("offsetof ")}
    problems = []
    for key, old in sorted(baseline.items()):
        kind, name = key.split(" ", 1)
        if key not in current:
            what = "no longer exported" if kind == "symbol" else "gone from dstrain.h"
            problems.append(f"{kind} {name}: {what}")
            continue
        new = current[key]
        if kind == "symbol" or new == old:
            continue
        if kind == "const" and name in VERSION_CONSTS:
            continue
        if kind == "sizeof" and name in structs and int(new) > int(old):
            continue  # a struct grew at its end (its fields' offsets are checked)
        problems.append(f"{kind} {name}: {old} in the baseline, {new} now")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"),
                        help="the CMake build directory holding libdstrain.so")
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--update", action="store_true", help="rewrite the baseline")
    args = parser.parse_args()
    lines = current_abi(args.build)
    if args.update:
        os.makedirs(os.path.dirname(args.baseline), exist_ok=True)
        with open(args.baseline, "w", encoding="utf-8") as f:
            f.write("# libdstrain's C ABI as of its last release: scripts/abi-check.py --update\n")
            f.write("\n".join(lines) + "\n")
        print(f"abi-check: wrote {len(lines)} lines to {args.baseline}")
        return 0
    with open(args.baseline, encoding="utf-8") as f:
        baseline = parse(f.read().splitlines())
    problems = compare(baseline, parse(lines))
    if problems:
        print(f"abi-check: the C ABI broke against {args.baseline}:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        print("Restore what was removed or changed (structs grow at their end only), or, "
              "for a new major version, bump DST_VERSION_MAJOR and the SONAME and run "
              "scripts/abi-check.py --update (docs/abi.md).", file=sys.stderr)
        return 1
    print(f"abi-check: {len(baseline)} baseline entries hold ({len(lines)} now)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
