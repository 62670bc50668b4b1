#!/usr/bin/env bash
# Builds dstrain with a sanitizer and runs the suite's native tests and a set
# of multi-rank Python tests under it; any report fails the run.
#
#   scripts/test-sanitizers.sh [address|thread|all] [--quick]
#
#   address  AddressSanitizer + UndefinedBehaviorSanitizer (build-asan)
#   thread   ThreadSanitizer (build-tsan)
#   clang    the fuzzing build of scripts/fuzz.sh (clang: AddressSanitizer +
#            UndefinedBehaviorSanitizer), native tests only
#   --quick  the unit and C ABI tests, the fuzz corpus replays and one
#            multi-rank test of each kind (data parallel at ZeRO 0-3,
#            pipeline, tensor parallel, offload, a killed rank, the SDK's
#            abort)
#   --native the native tests only (no Python)
#
# The CUDA plugin is not built (nvcc and the driver are not instrumented).
# Python tests that load libdstrain.so into python itself run with the
# sanitizer's runtime preloaded and leak detection off (python keeps its
# objects to the end); the ranks they start are our own instrumented
# programs. Suppressions: tests/sanitizers/*.supp, each entry justified there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

kind=${1:-address}
quick=0
native=0
for arg in "$@"; do
  if [ "$arg" = "--quick" ]; then quick=1; fi
  if [ "$arg" = "--native" ]; then native=1; fi
done
if [ "$kind" = "all" ]; then
  status=0
  "$0" address "${@:2}" || status=1
  "$0" thread "${@:2}" || status=1
  exit $status
fi
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
case "$kind" in
  address)
    build=${DSTRAIN_ASAN_BUILD:-build-asan} runtime=libasan.so
    configure=(-DDSTRAIN_SANITIZE=address) targets=() ;;
  thread)
    build=${DSTRAIN_TSAN_BUILD:-build-tsan} runtime=libtsan.so
    configure=(-DDSTRAIN_SANITIZE=thread) targets=() ;;
  clang)
    # The fuzzing build (scripts/fuzz.sh): clang, AddressSanitizer +
    # UndefinedBehaviorSanitizer; its native tests only (CI's slice).
    build=${DSTRAIN_FUZZ_BUILD:-build-fuzz} runtime="" native=1
    configure=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDSTRAIN_FUZZ=ON)
    targets=(--target dstrain_unit_tests dstrain_capi_tests) ;;
  *) echo "usage: $0 [address|thread|clang|all] [--quick] [--native]" >&2; exit 2 ;;
esac

echo "== $kind: configuring and building $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSTRAIN_TEST_HOOKS=ON \
  "${configure[@]}" >/dev/null
cmake --build "$build" -j "$jobs" "${targets[@]}" >/dev/null

# Reports go to files (one per process) so that a report of a rank that
# exits non-zero on purpose (fault tests) is still seen; any file fails the run.
reports="$ROOT/$build/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
supp="$ROOT/tests/sanitizers"
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:suppressions=$supp/asan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export TSAN_OPTIONS="log_path=$reports/tsan:halt_on_error=0:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$supp/tsan.supp"
# One OpenMP thread: GNU libgomp is not instrumented, so ThreadSanitizer
# cannot see its barriers; our own threads (communication, prefetch, monitor,
# offload I/O) are what it checks.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

failed=()
run() {  # run NAME COMMAND...: records a failure, goes on
  local name=$1
  shift
  local start=$SECONDS
  if "$@" >"$reports/$name.log" 2>&1; then
    echo "   ok   $name ($((SECONDS - start)) s)"
  else
    echo "   FAIL $name ($((SECONDS - start)) s): $reports/$name.log"
    tail -20 "$reports/$name.log" | sed 's/^/        /'
    failed+=("$name")
  fi
}

echo "== $kind: native tests"
unit_filter='*'
if [ $quick -eq 1 ]; then
  # The slow end-to-end unit suites run in the full pass only.
  unit_filter='-*Gradcheck*:*GradCheck*:*LongRun*'
fi
run unit "$build/tests/dstrain_unit_tests" --gtest_filter="$unit_filter" --gtest_brief=1
run capi "$build/tests/dstrain_capi_tests" --gtest_brief=1
for replay in "$build"/tests/fuzz_*_replay; do  # not in the fuzzing build (scripts/fuzz.sh)
  [ -x "$replay" ] || continue
  target=$(basename "$replay" _replay)
  inputs=(tests/fuzz/corpus/"$target")
  if [ -d tests/fuzz/regressions/"$target" ]; then inputs+=(tests/fuzz/regressions/"$target"); fi
  run "$target" "$replay" "${inputs[@]}"
done

if [ $native -eq 1 ]; then python_tests=(); else
echo "== $kind: multi-rank Python tests"
# The files --quick samples last: a pass cut short still adds what --quick
# does not run.
python_tests=(
  "test_param_offload.py"
  "test_swap_resume.py"
  "test_stalls.py"
  "sdk/test_engine_cycles.py"
  "test_faults.py"
  "sdk/test_abort.py"
  "test_abort_unblocks.py"
  "test_offload.py"
  "test_data_parallel.py"
  "test_pipeline_gpt.py"
  "test_tensor_parallel.py"
)
if [ $quick -eq 1 ]; then
  python_tests=(
    "test_data_parallel.py -k stage"
    "test_pipeline_gpt.py -k 1f1b"
    "test_tensor_parallel.py -k equals"
    "test_offload.py -k reproduces_the_resident_run"
    "test_faults.py -k killed"
    "sdk/test_abort.py"
    "test_abort_unblocks.py"
  )
fi
fi
preload=""
if [ -n "$runtime" ]; then preload=$(gcc -print-file-name="$runtime"); fi
for entry in "${python_tests[@]}"; do
  read -r -a words <<<"$entry"
  name="python_$(basename "${words[0]}" .py)"
  # python itself is not instrumented: the runtime is preloaded for the
  # library cffi loads into it, and leaks are python's to keep.
  run "$name" env DSTRAIN_BUILD_DIR="$ROOT/$build" LD_PRELOAD="$preload" \
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
    /usr/bin/python3 -m pytest -q -x -p no:cacheprovider "tests/python/${words[0]}" "${words[@]:1}"
done

# A report is a file with an error in it (a warning such as "failed to
# allocate" for a refused allocation the test asked for is not one).
found=()
for f in "$reports"/asan.* "$reports"/ubsan.* "$reports"/tsan.*; do
  [ -e "$f" ] || continue
  if grep -qE "ERROR: (Address|Leak|UndefinedBehavior|Thread)Sanitizer|runtime error:|WARNING: ThreadSanitizer" "$f"; then
    found+=("$f")
  fi
done
if [ ${#found[@]} -ne 0 ]; then
  echo "== $kind: ${#found[@]} sanitizer report(s):"
  for f in "${found[@]}"; do
    echo "--- $f"
    head -40 "$f"
  done
  failed+=("reports")
fi
if [ ${#failed[@]} -ne 0 ]; then
  echo "== $kind: FAILED: ${failed[*]}"
  exit 1
fi
echo "== $kind: clean (no sanitizer report)"
