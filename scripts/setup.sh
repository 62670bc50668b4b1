#!/usr/bin/env bash
# Command 1 of 2: install what is missing, build, and run the main job — train
# the default GPT on the default corpus (Debian's fortunes) with a progress bar.
# Extra arguments go to `dstrain train` (e.g. --steps 100 --data FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec ./build/dstrain train "$@"
