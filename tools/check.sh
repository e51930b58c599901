#!/usr/bin/env bash
# README's test command: install what is missing, build, run every test. GPU tests (label gpu)
# report "skipped" on a machine without a CUDA device.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tools/setup.sh
cmake --preset default
cmake --build --preset default
ctest --preset default
