#!/usr/bin/env bash
# The GPU test suite (issue 16): builds dstrain with the CUDA plugin and runs
# the tests labelled "gpu" (tests/gpu/). On a machine without a CUDA device
# they are skipped, and this script says so and exits 2, so a skipped run is
# never mistaken for a GPU-verified one.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${DSTRAIN_BUILD_DIR:-build}
if [ ! -d "$BUILD" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$BUILD" -j"$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --target dstrain_gpu_tests
log=$(mktemp)
ctest --test-dir "$BUILD" -L gpu --output-on-failure | tee "$log"
if grep -q "Skipped" "$log"; then
  echo "test-gpu: GPU tests were skipped (no CUDA device or plugin here): nothing was verified on a GPU" >&2
  exit 2
fi
