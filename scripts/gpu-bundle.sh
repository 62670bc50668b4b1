#!/usr/bin/env bash
# Packs the GPU test suite for a GPU machine that lacks dstrain's build
# dependencies (a CUDA container with its own driver, cuBLASLt and NCCL, but
# no OpenBLAS, oneDNN or GoogleTest): the test binary, the two plugins, the
# non-system libraries they load (compressed), the dstrain CLI, and run.sh,
# which runs `dstrain report` (the devices as dstrain sees them), the GPU tests, then compute-sanitizer memcheck and racecheck over the
#   kernel tests (where compute-sanitizer exists), then bench/bench_gpu.py (the
#   GPT-2 124M model on the device through the kernel backend, and where a
#   CUDA PyTorch exists the same model in PyTorch), bench/bench_gpu_gemm.py
#   and bench/bench_gpu_kernels.py
# and leaves logs in $OUT (default: <bundle>/out). Build first
# (scripts/build.sh); the machine needs CUDA 13's libcublasLt and libnccl.
#
# Usage: bash scripts/gpu-bundle.sh [BUNDLE_DIR]      (default .gpu)
#        then, on the GPU machine, from a checkout: bash BUNDLE_DIR/run.sh
#        (PROFILE=1 adds a profile of the GPT-2 step; MEMCHECK=0, RACECHECK=0, TRAIN=0, MBENCH=0, EBENCH=0, OBENCH=0, BENCH=0, KBENCH=0
#         skip parts; TESTS=0 skips the GPU tests; GTEST_FILTER picks some; TRAIN_ARGS /
#         MBENCH_ARGS / EBENCH_ARGS / BENCH_ARGS / KBENCH_ARGS pass options to the checks)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${DSTRAIN_BUILD_DIR:-build}
BUNDLE=${1:-.gpu}
for f in "$BUILD/tests/dstrain_gpu_tests" "$BUILD/libdstrain_cuda.so" "$BUILD/libdstrain_nccl.so" "$BUILD/dstrain" \
  "$BUILD/bench/bench_gpu_model"; do
  [ -f "$f" ] || { echo "gpu-bundle: $f is missing: build with the CUDA toolkit first (scripts/build.sh)" >&2; exit 1; }
done
rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/lib"
cp "$BUILD/tests/dstrain_gpu_tests" "$BUILD/libdstrain_cuda.so" "$BUILD/libdstrain_nccl.so" \
  "$BUILD/dstrain" "$BUILD/bench/bench_gpu_model" "$BUNDLE/"
# The tokenizer plugin goes beside libdstrain.so, where dstrain looks for it.
SP=()
if [ -f "$BUILD/libdstrain_sentencepiece.so" ]; then
  cp -L "$BUILD/libdstrain_sentencepiece.so" "$BUNDLE/lib/"
  SP=("$BUNDLE/lib/libdstrain_sentencepiece.so")
fi
# Every library the three load except the C/C++ runtime (the target's own is
# newer or equal) and what the GPU machine must bring (driver, cuBLASLt, NCCL).
ldd "$BUNDLE"/dstrain_gpu_tests "$BUNDLE"/libdstrain_cuda.so "$BUNDLE"/libdstrain_nccl.so \
  "$BUNDLE"/dstrain "$BUNDLE"/bench_gpu_model "${SP[@]}" |
  awk '/=> \//{print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|ld-linux-x86-64|libcublasLt|libcublas|libnccl|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$BUNDLE/lib/"; done
tar cJf "$BUNDLE/libs.tar.xz" -C "$BUNDLE/lib" . && rm -rf "$BUNDLE/lib"
# The training check's corpus (the GPU machine has no fortunes package) and its
# CPU reference: the same jobs on this machine's CPU engine (a few minutes;
# TRAIN_REFERENCE=FILE reuses one written before by the same build).
CORPUS=${DSTRAIN_DEFAULT_CORPUS_DIR:-/usr/share/games/fortunes}
mkdir -p "$BUNDLE/fortunes"
find "$CORPUS" -maxdepth 1 -type f ! -name '*.*' -exec cp {} "$BUNDLE/fortunes/" \;
if [ -n "${TRAIN_REFERENCE:-}" ]; then
  cp "$TRAIN_REFERENCE" "$BUNDLE/gpu_train_reference.json"
else
  DSTRAIN_DEFAULT_CORPUS_DIR="$PWD/$BUNDLE/fortunes" /usr/bin/python3 bench/gpu_train_check.py \
    --build-dir "$BUILD" --write-reference "$BUNDLE/gpu_train_reference.json" > /dev/null
fi
cat > "$BUNDLE/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs the bundled GPU suite (made by scripts/gpu-bundle.sh) from a dstrain checkout.
G=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$G/out}
mkdir -p "$OUT" "$G/lib" && tar xJf "$G/libs.tar.xz" -C "$G/lib"
cd "$G"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv | tee "$OUT/device.txt"
LT=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13' 2>/dev/null | head -1)")
NC=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1)")
echo "cublasLt: $LT nccl: $NC" | tee -a "$OUT/device.txt"
export DSTRAIN_CUDA_PLUGIN=$G/libdstrain_cuda.so DSTRAIN_NCCL_PLUGIN=$G/libdstrain_nccl.so
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 DSTRAIN_DEFAULT_CORPUS_DIR=$G/fortunes
(
  export LD_LIBRARY_PATH=$G/lib:$LT:$NC
  ldd ./dstrain_gpu_tests ./libdstrain_cuda.so ./libdstrain_nccl.so ./dstrain | grep "not found" | tee -a "$OUT/device.txt"
  ./dstrain report > "$OUT/report.txt" 2>&1
  echo "dstrain report rc $?" | tee -a "$OUT/device.txt"
  grep -iE -A6 "cuda|gpu|nccl" "$OUT/report.txt" | head -30
  if [ "${TESTS:-1}" = 1 ]; then
    timeout 300 ./dstrain_gpu_tests --gtest_output="xml:$OUT/gpu_tests.xml" \
      --gtest_filter="${GTEST_FILTER:-*}" > "$OUT/gpu_tests.log" 2>&1
    echo "gpu tests rc $?" | tee -a "$OUT/device.txt"
    grep -E "^\[  (FAILED|SKIPPED|PASSED) |Failure|Expected|Which is|error" "$OUT/gpu_tests.log" | head -80
  fi
  # The sanitizers skip the GPT-2-shape tests (slow under them) and the two
  # that fail CUDA calls on purpose (compute-sanitizer reports those as errors).
  for tool in memcheck racecheck; do
    var=$(echo "$tool" | tr a-z A-Z)
    if [ "${!var:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
      timeout 200 compute-sanitizer --tool "$tool" --print-limit 20 ./dstrain_gpu_tests \
        --gtest_filter='Cuda*:-*Gpt2Shapes*:*OutOfMemory*:*FailedCall*' > "$OUT/$tool.log" 2>&1
      echo "$tool rc $?" | tee -a "$OUT/device.txt"
      # Each report under the test that made it, addresses masked so repeats fold.
      grep -E "^\[ RUN|Race reported|access at|Invalid|Program hit|^=========     at" "$OUT/$tool.log" |
        sed -E 's/0x[0-9a-f]+/0x_/g' | uniq -c | grep -B1 -vE "^ +[0-9]+ \[ RUN" | head -60
      tail -3 "$OUT/$tool.log"
    fi
  done
)
# bench_gpu.py finds the model bench at <build-dir>/bench/bench_gpu_model: a
# wrapper there gives it the bundled libraries without handing them to python.
mkdir -p "$G/bench"
printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$G/lib:$LT:$NC" "$G/bench_gpu_model" \
  > "$G/bench/bench_gpu_model" && chmod +x "$G/bench/bench_gpu_model"
PY=python3
python3 -c "import torch" 2> /dev/null || PY=/usr/bin/python3
if [ "${MBENCH:-1}" = 1 ]; then
  (cd "$G/.." && PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$LT:$NC timeout 400 $PY bench/bench_gpu.py \
    --build-dir "$G" ${MBENCH_ARGS:-} 2>&1 | tee "$OUT/bench_gpu.txt")
fi
# dstrain train on the device against the CPU run: the built-in job and GPT-2
# 124M in fp32 and bf16, each step's loss within the stated bounds.
if [ "${TRAIN:-1}" = 1 ]; then
  (cd "$G/.." && set -o pipefail && LD_LIBRARY_PATH=$G/lib:$LT:$NC timeout 300 /usr/bin/env python3 bench/gpu_train_check.py \
    --check "$G/gpu_train_reference.json" --build-dir "$G" ${TRAIN_ARGS:-} 2>&1 |
    tee "$OUT/gpu_train_check.txt")
  echo "train check rc $?" | tee -a "$OUT/device.txt"
fi
# The whole training step on the device: dstrain train with dstrain.device
# "cuda" (GPT-2 124M, bf16, ZeRO 1), tokens/s from its metrics log.
if [ "${EBENCH:-1}" = 1 ]; then
  (cd "$G/.." && PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$G/lib:$LT:$NC timeout 300 $PY bench/bench_gpu.py \
    --engine --build-dir "$G" --repeats 1 --steps 5 --precisions bf16 --attention auto,fused \
    ${EBENCH_ARGS:-} 2>&1 |
    tee "$OUT/bench_gpu_engine.txt")
fi
# The same with ZeRO-Offload (ZeRO 2, the optimizer on the host, pinned
# transfers overlapped with CPU-Adam on every core, OBENCH_THREADS to
# change) and ZeRO-Infinity (ZeRO 3, the parameter shard on the host too).
if [ "${OBENCH:-1}" = 1 ]; then
  for mode in "--zero 2 --offload optimizer" "--zero 3 --offload infinity"; do
    (cd "$G/.." && PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$G/lib:$LT:$NC \
      OMP_NUM_THREADS=${OBENCH_THREADS:-$(nproc)} timeout 300 $PY \
      bench/bench_gpu.py --engine --build-dir "$G" --repeats 1 --steps 3 --precisions bf16 \
      $mode 2>&1 | tee -a "$OUT/bench_gpu_offload.txt")
  done
fi
# Where a GPT-2 124M bf16 step's time goes: each kernel-table entry's device
# time (DSTRAIN_CUDA_KERNEL_TIMES), the engine's own timers (forward,
# backward, step) from the metrics log, and with NSYS=1 Nsight Systems'.
if [ "${PROFILE:-0}" = 1 ]; then
  P=$(mktemp -d)
  printf '%s' '{"type": "gpt", "vocab_size": 50257, "n_ctx": 1024, "n_layer": 12, "n_head": 12,
    "d_model": 768, "seed": 1}' > "$P/model.json"
  printf '%s' '{"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0, "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
    "zero_optimization": {"stage": 1}, "dstrain": {"device": "cuda",
    "monitor": {"log": {"enabled": true, "path": "'"$P"'/log", "format": "jsonl"}}}}' > "$P/ds.json"
  RUN=(./dstrain train --config "$P/ds.json" --model "$P/model.json" --steps "${PROFILE_STEPS:-6}"
    --eval-interval 1000000 --eval-batches 1 -q)
  # Each kernel-table entry's device time (entry_times.cuh), and with NSYS=1
  # Nsight Systems' kernel table where its importer works on the machine.
  DSTRAIN_CUDA_KERNEL_TIMES=1 LD_LIBRARY_PATH="$G/lib:$LT:$NC" timeout 120 "${RUN[@]}" \
    > "$OUT/profile.txt" 2>&1
  grep -A40 "device time" "$OUT/profile.txt" | head -45
  NSYS_BIN=$(command -v nsys || find /usr/local/cuda*/ /opt/nvidia -name nsys -type f 2> /dev/null | head -1)
  if [ "${NSYS:-0}" = 1 ] && [ -n "$NSYS_BIN" ]; then
    # The bundled libraries go to dstrain alone: nsys's own importer loads its own.
    timeout 240 "$NSYS_BIN" profile -t cuda,osrt --force-overwrite true -o "$P/prof" \
      env LD_LIBRARY_PATH="$G/lib:$LT:$NC" "${RUN[@]}" >> "$OUT/profile.txt" 2>&1
    for r in cuda_gpu_kern_sum cuda_api_sum; do
      timeout 120 "$NSYS_BIN" stats --report "$r" --format table "$P/prof.nsys-rep" 2> /dev/null | head -40
    done | tee -a "$OUT/profile.txt"
  fi
  /usr/bin/env python3 -c "import json, sys; rows = [json.loads(l) for l in open(sys.argv[1])]
print('engine timers (last step, s):', json.dumps(rows[-1].get('timers')), 'step', rows[-1].get('step_seconds'))" \
    "$(ls "$P"/log/*.jsonl | head -1)" | tee -a "$OUT/profile.txt"
  rm -rf "$P"
fi
# The benches' peer is a CUDA PyTorch: the GPU machine's python3 on PATH, not
# Debian's /usr/bin/python3 (whose torch is CPU-only) that the CPU benches use.
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null; then
  cd "$G/.."
  export LD_LIBRARY_PATH=$LT:$NC PYTHONUNBUFFERED=1
  [ "${BENCH:-1}" = 1 ] && timeout 200 python3 bench/bench_gpu_gemm.py --plugin "$G/libdstrain_cuda.so" \
    ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_gpu_gemm.txt"
  [ "${KBENCH:-1}" = 1 ] && timeout 200 python3 bench/bench_gpu_kernels.py --plugin "$G/libdstrain_cuda.so" \
    ${KBENCH_ARGS:-} 2>&1 | tee "$OUT/bench_gpu_kernels.txt"
fi
exit 0
EOF
chmod +x "$BUNDLE/run.sh"
echo "gpu-bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)); on the GPU machine: bash $BUNDLE/run.sh"
