#!/usr/bin/env bash
# CI's time-bounded slice of the reliability tooling: one clang build with
# AddressSanitizer + UndefinedBehaviorSanitizer + libFuzzer coverage
# (build-fuzz); every fuzz target for SECONDS (default 15) from the seed
# corpus; then the unit and C ABI tests under the same sanitizers. The full
# runs: scripts/fuzz.sh, scripts/test-sanitizers.sh (address, thread, with
# the multi-rank Python tests), scripts/soak.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fuzz.sh "${1:-15}"
bash scripts/test-sanitizers.sh clang --quick
