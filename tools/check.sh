#!/usr/bin/env bash
# README's test command: install what is missing, build, run every test (the C++ ones, then the
# Python package's), fuzz the decoders briefly, run every CPU test again under the sanitizers. GPU
# tests (label gpu) report "skipped" on a machine without a CUDA device. CI runs this on a clean
# clone (2 cores, cold ccache) within the 90 minutes it allows (docs/development.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# ccache keys on paths relative to the source root: the Python package's build (build/python)
# then reuses the objects of the C++ build (build/default), and a fresh clone those of another.
export CCACHE_BASEDIR="$root"
bash tools/setup.sh
# The layers, the file-system seam and the public header list hold as docs/design.md says.
python3 tools/check_layers.py
cmake --preset default
cmake --build --preset default
ctest --preset default
# The Python package: built from the same sources by pip (scikit-build-core, build/python), where
# the C++ build's objects are ccache hits (same compiler, flags and relative paths), installed into
# the torch venv, and its tests (python/tests, the MiniLM end to end among them).
bash tools/python.sh
# The decoders of what a cache directory holds, fuzzed briefly (longer: bash tools/fuzz.sh 600).
bash tools/fuzz.sh 20
# Every CPU test again under ASan and UBSan, leaks checked (build/sanitize; no benches, demo
# program or GPU tests).
bash tools/sanitize.sh
