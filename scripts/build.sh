#!/usr/bin/env bash
# Configures and builds dstrain (Release) into ./build. DSTRAIN_TEST_HOOKS=ON
# (scripts/test.sh) compiles the test and fault-injection hooks in; without
# it the library has none (switching recompiles only the files that hold them).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDSTRAIN_TEST_HOOKS="${DSTRAIN_TEST_HOOKS:-OFF}" >/dev/null
cmake --build build -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"  # nproc honours OMP_NUM_THREADS
