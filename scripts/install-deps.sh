#!/usr/bin/env bash
# Installs the Debian packages dstrain builds, tests and trains with, if any
# are missing. Safe to run again: it only calls apt-get when something is absent.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev   # BLAS (OpenMP build: one thread pool with our kernels)
  libdnnl-dev              # oneDNN: fp32 GEMMs (run-time ISA choice), the bf16 path
  ocl-icd-opencl-dev       # oneDNN's CMake config finds OpenCL (only Recommended by libdnnl-dev)
  nlohmann-json3-dev       # config, metrics, checkpoint metadata
  libcli11-dev             # the dstrain command line
  libgloo-dev              # CPU collectives (data parallelism, ZeRO)
  libgtest-dev             # unit and C ABI tests
  liburing-dev             # io_uring: the NVMe offload tier's I/O
  libsentencepiece-dev     # SentencePiece tokenizers (tokenizer.model)
  libicu-dev               # Unicode regular expressions of the byte-level BPE tokenizers
  sentencepiece python3-sentencepiece  # spm_train (the documented road), the tokenizer oracle
  fio                      # bench/bench_offload.py: the drive's own figures beside ours
  python3 python3-torch python3-numpy python3-pytest python3-cffi  # PyTorch oracle, tests
  python3-pip mypy python3-typeshed  # Python SDK: offline install test, strict typing (cffi stubs)
  python3-venv             # the install test: the SDK in a fresh venv against an installed tree
  fortunes                 # the default training corpus (/usr/share/games/fortunes)
  iproute2                 # two-host test (ip netns)
  openmpi-bin              # a real mpirun launches a job in the tests
  slurmd slurmctld slurm-client munge  # a one-node Slurm cluster runs srun in the tests
  prometheus-cpp-dev       # per-rank metrics registry and text exposition
  libcivetweb-dev          # the metrics HTTP server (/metrics, /api/v1, dashboard)
  prometheus               # promtool check metrics; the real-scrape test
  chromium                 # the headless browser test of the dashboard
  clang libclang-rt-14-dev libomp-dev  # libFuzzer (scripts/fuzz.sh), the clang sanitizer build
  mkdocs mkdocs-material python3-yaml  # the documentation site (mkdocs build --strict in the tests)
  curl                     # the docs' scrape example (docs/howto/grafana.md), run by test_docs
)

# The dashboard is built from npm packages (uPlot, playwright-core): the
# image's Node.js and npm if present, else Debian's.
if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi

# The Rust SDK needs cargo: rustup's (in $HOME/.cargo/bin) if present, else Debian's.
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  PACKAGES+=(cargo)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "dstrain: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The dashboard's npm packages (uPlot, embedded at build time; playwright-core,
# the browser test): `npm ci` when dashboard/node_modules is missing or older
# than package-lock.json. No browser downloads: the test uses /usr/bin/chromium.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -f "$ROOT/dashboard/node_modules/.package-lock.json" ] ||
   [ "$ROOT/dashboard/node_modules/.package-lock.json" -ot "$ROOT/dashboard/package-lock.json" ]; then
  echo "dstrain: installing the dashboard's npm packages (npm ci --prefix dashboard)"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix "$ROOT/dashboard" --no-audit --no-fund
fi

# The tests' independent implementations (tokenizers.js, the byte-level BPE
# oracle): `npm ci --prefix tests/oracles` when missing or older than its lock.
if [ ! -f "$ROOT/tests/oracles/node_modules/.package-lock.json" ] ||
   [ "$ROOT/tests/oracles/node_modules/.package-lock.json" -ot "$ROOT/tests/oracles/package-lock.json" ]; then
  echo "dstrain: installing the tests' oracles (npm ci --prefix tests/oracles)"
  npm ci --prefix "$ROOT/tests/oracles" --no-audit --no-fund
fi
