#!/usr/bin/env bash
# Command 2 of 2: install what is missing, build, and run every test
# (GoogleTest unit and C ABI suites, PyTorch parity and CLI tests under pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
DSTRAIN_TEST_HOOKS=ON bash scripts/build.sh  # the tests drive the stand-in device and fault injection
# The cores, counted before OMP_NUM_THREADS=1 is exported: GNU nproc honours
# OMP_NUM_THREADS, and would make ctest run one test at a time.
jobs=$(nproc)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900
