#!/usr/bin/env bash
# Builds the Python package with pip into the torch venv (tools/setup.sh), runs its tests, then
# type-checks it (tools/typecheck.py: mypy and pyright over the package, the tests, the docs' examples).
#   bash tools/python.sh [PYTEST ARGS...]
# The build directory is build/python (pyproject.toml); CCACHE_BASEDIR at the source root and the
# `default` preset's compiler make the library's objects the C++ build's, so they come from ccache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
torch_version=$(head -n1 cmake/torch-version)
venv="${SNAPCACHE_DEPS_DIR:-$HOME/.cache/snapcache-deps}/venv-torch-$torch_version"
export CCACHE_BASEDIR="$root"
# scikit-build-core would take Python's compiler (g++); CMake's own default (c++) is what the
# default preset configured with, and ccache keys on the compiler's name.
export CXX="${CXX:-c++}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
started=$(date +%s)
"$venv/bin/python3" -m pip install -q --no-build-isolation .
echo "python: pip install took $(( $(date +%s) - started )) s"
# From outside the source tree, so `import snapcache` is the installed package.
cd /tmp
status=0
"$venv/bin/python3" -m pytest -q -p no:cacheprovider "$root/python/tests" "$@" || status=$?
# mypy and pyright over the package, its tests and the docs' examples (tools/typecheck.py; seconds).
"$venv/bin/python3" "$root/tools/typecheck.py" || status=$?
exit "$status"
