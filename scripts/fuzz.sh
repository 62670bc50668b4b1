#!/usr/bin/env bash
# Fuzzes every parser dstrain exposes to files or the network with libFuzzer:
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS per target (default 60); TARGET: fuzz_config, fuzz_model_spec,
# fuzz_safetensors, fuzz_checkpoint_meta, fuzz_token_file, fuzz_npy,
# fuzz_store_wire, fuzz_http, fuzz_hf_checkpoint (default: all of
# tests/fuzz/fuzz_*.cc). Builds with clang into build-fuzz (everything
# instrumented: coverage, AddressSanitizer, UndefinedBehaviorSanitizer),
# starts from the committed seed corpus (tests/fuzz/corpus) and the
# regressions (tests/fuzz/regressions), keeps what it learns in
# build-fuzz/fuzz-corpus, and writes crashes, timeouts and leaks to
# build-fuzz/fuzz-findings/TARGET/. A finding fails the run; fixed, it is
# copied into tests/fuzz/regressions/TARGET/, which every build replays
# (ctest fuzz_replay_TARGET).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

seconds=${1:-60}
shift || true
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for src in tests/fuzz/fuzz_*.cc; do targets+=("$(basename "$src" .cc)"); done
fi
if ! command -v clang++ >/dev/null 2>&1; then
  echo "scripts/fuzz.sh needs clang (libFuzzer) and libomp-dev: apt-get install clang libomp-dev" >&2
  exit 2
fi

build=${DSTRAIN_FUZZ_BUILD:-build-fuzz}
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
echo "== fuzz: building ${targets[*]} in $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DDSTRAIN_FUZZ=ON -DDSTRAIN_TEST_HOOKS=ON >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >/dev/null

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Leaks are findings too, except in the runtimes' own caches (tests/sanitizers/lsan.supp).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0"

failed=()
for target in "${targets[@]}"; do
  work="$build/fuzz-corpus/$target"
  findings="$build/fuzz-findings/$target"
  mkdir -p "$work" "$findings"
  inputs=("$work" "tests/fuzz/corpus/$target")
  if [ -d "tests/fuzz/regressions/$target" ]; then inputs+=("tests/fuzz/regressions/$target"); fi
  log="$findings/fuzz.log"
  start=$SECONDS
  if "$build/tests/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 "${inputs[@]}" \
      >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
    echo "   ok   $target: $runs inputs in $((SECONDS - start)) s, coverage $cov edges, no finding"
  else
    echo "   FAIL $target: a finding in $findings (log: $log)"
    grep -m3 -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | sed 's/^/        /' || true
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "== fuzz: findings in ${failed[*]}"
  exit 1
fi
echo "== fuzz: ${#targets[@]} targets, ${seconds} s each, no finding"
