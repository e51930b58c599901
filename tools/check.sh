#!/usr/bin/env bash
# README's test command: install what is missing, build, run every test (the C++ ones, then the
# Python package's). GPU tests (label gpu) report "skipped" on a machine without a CUDA device.
# The slow passes (the decoders fuzzed, every CPU test again under the sanitizers) run after it in
# CI (.ci/run), or here with --slow. CI runs all of it on a clean clone (2 cores, cold ccache)
# within the 90 minutes it allows (docs/development.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# ccache keys on paths relative to the source root: the Python package's build (build/python)
# then reuses the objects of the C++ build (build/default), and a fresh clone those of another.
export CCACHE_BASEDIR="$root"
bash tools/setup.sh
# The layers and the file-system seam hold as src/CMakeLists.txt and tools/check_layers.py say, and
# no function in src/ is longer than 100 lines (lizard counts them).
python3 tools/check_layers.py
"${SNAPCACHE_DEPS_DIR:-$HOME/.cache/snapcache-deps}/venv-torch-$(head -n1 cmake/torch-version)/bin/python3" -m lizard \
  src -l cpp -L 100 -C 10000 -T nloc=100000 -T token_count=1000000 -T parameter_count=1000 -w
cmake --preset default
cmake --build --preset default
ctest --preset default
# The Python package: built from the same sources by pip (scikit-build-core, build/python), where
# the C++ build's objects are ccache hits (same compiler, flags and relative paths), installed into
# the torch venv, and its tests (python/tests, the MiniLM end to end among them).
bash tools/python.sh
if [[ "${1:-}" == --slow ]]; then
  bash tools/slow-checks.sh
fi
