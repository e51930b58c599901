#!/usr/bin/env bash
# Builds the Python package against another torch and runs its tests: what `pip install .` does in a
# user's environment whose torch is not the pinned one (cmake/torch-version; any release of the
# series cmake/torch-supported names).
#   bash tools/check-torch.sh 2.14.1 [PYTEST ARGS...]
# - a virtual environment of its own, ${SNAPCACHE_DEPS_DIR:-~/.cache/snapcache-deps}/venv-torch-VERSION,
#   with that torch and the test dependencies (tools/setup.sh --torch VERSION; a few GiB, once);
# - `pip install .` into it, pip's default isolated build as a user runs it, in the build directory
#   build/python-torch-VERSION (not build/python, the pinned torch's);
# - python/tests against the installed package, then a summary: the torch, the wheel's torch
#   requirement, the build time and pytest's counts.
# Exits non-zero when the build or a test fails.
set -euo pipefail
version=${1:?"usage: tools/check-torch.sh TORCH_VERSION [PYTEST ARGS...]   (e.g. 2.14.1)"}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="${SNAPCACHE_DEPS_DIR:-$HOME/.cache/snapcache-deps}/venv-torch-$version"
build_dir="build/python-torch-$version"
log_dir="$root/$build_dir-logs"
mkdir -p "$log_dir"

bash tools/setup.sh --torch "$version"
python="$venv/bin/python3"
torch_found=$("$python" -c "import torch; print(torch.__version__)")

source tools/package-in-venv.sh
install_package "check-torch: torch $torch_found" "$python" "$build_dir" "$log_dir"
requirement=$(cd /tmp && "$python" -c "import importlib.metadata as m, re; print(', '.join(r for r in m.requires('snapcache') or [] if re.match(r'torch\\b', r)))")
built=$(cd /tmp && "$python" -c "import snapcache; print(snapcache.TORCH_BUILT)")

run_tests "$python" "$log_dir" "$root/python/tests" "$@"

echo
echo "check-torch: torch $torch_found ($venv)"
echo "check-torch: built against torch $built in $build_seconds s ($build_dir); the wheel requires: $requirement"
echo "check-torch: python/tests: $test_counts"
if (( test_status != 0 )); then
  echo "check-torch: FAILED"
  exit "$test_status"
fi
echo "check-torch: ok"
