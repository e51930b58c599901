#!/usr/bin/env bash
# README's test command: install what is missing, build, run every test, fuzz the decoders
# briefly, run the store's tests under the sanitizers. GPU tests (label gpu) report "skipped" on a machine without a CUDA device.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tools/setup.sh
cmake --preset default
cmake --build --preset default
ctest --preset default
# The decoders of what a cache directory holds, fuzzed briefly (longer: bash tools/fuzz.sh 600).
bash tools/fuzz.sh 20
# The store's layers and tests again under ASan and UBSan, leaks checked.
bash tools/sanitize.sh
