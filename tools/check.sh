#!/usr/bin/env bash
# README's test command: install what is missing, build, run every test, fuzz the decoders
# briefly, run every CPU test again under the sanitizers. GPU tests (label gpu) report "skipped" on
# a machine without a CUDA device. CI runs this on a clean clone (2 cores, cold ccache) in about
# 40 of the 90 minutes it allows, the sanitized build and run about 12 of them (docs/development.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tools/setup.sh
cmake --preset default
cmake --build --preset default
ctest --preset default
# The decoders of what a cache directory holds, fuzzed briefly (longer: bash tools/fuzz.sh 600).
bash tools/fuzz.sh 20
# Every CPU test again under ASan and UBSan, leaks checked (build/sanitize; no benches, demo
# program or GPU tests).
bash tools/sanitize.sh
