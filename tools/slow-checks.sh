#!/usr/bin/env bash
# The slow passes, after README's test command (tools/check.sh) has built and passed: CI runs them
# (.ci/run), as does `bash tools/check.sh --slow`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CCACHE_BASEDIR="$root"
# The decoders of what a cache directory holds, fuzzed briefly (longer: bash tools/fuzz.sh 600).
bash tools/fuzz.sh 20
# Every CPU test again under ASan and UBSan, leaks checked (build/sanitize; no benches, demo
# program or GPU tests).
bash tools/sanitize.sh
# vLLM's load format `snapcache` in a real vLLM (its CPU build, in a venv of its own; the package
# built against its torch; python/tests/vllm).
bash tools/check-vllm.sh
