#!/usr/bin/env bash
# Configures and builds dstrain (Release) into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"  # nproc honours OMP_NUM_THREADS
