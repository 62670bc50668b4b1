#!/usr/bin/env bash
# Installs the Debian packages dstrain builds, tests and trains with, if any
# are missing. Safe to run again: it only calls apt-get when something is absent.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev   # BLAS (OpenMP build: one thread pool with our kernels)
  nlohmann-json3-dev       # config, metrics, checkpoint metadata
  libcli11-dev             # the dstrain command line
  libgloo-dev              # CPU collectives (data parallelism, ZeRO)
  libgtest-dev             # unit and C ABI tests
  python3 python3-torch python3-numpy python3-pytest python3-cffi  # PyTorch oracle, tests
  python3-pip mypy         # Python SDK: offline install test, strict typing test
  fortunes                 # the default training corpus (/usr/share/games/fortunes)
  iproute2 procps          # two-host test (ip netns), fault tests (pgrep)
)

# The Rust SDK needs cargo: rustup's (in $HOME/.cargo/bin) if present, else Debian's.
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  PACKAGES+=(cargo)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "dstrain: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
