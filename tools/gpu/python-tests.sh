#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with .deps carried (and, since the machine's
# image has other versions or none, the pinned transformers and diffusers wheels carried in
# .whl/fw: see docs/development.md): builds the Python module with the `gpu` preset against the
# machine's own torch, runs python/tests there (their CUDA cases included), then, with
# FIRST_OUTPUT=N, bench/first_output_bench.py --device cuda --repeats N. Logs go to $OUT when set.
#   FIRST_OUTPUT=2 bash tools/gpu/python-tests.sh [--no-tests | PYTEST ARGS, paths absolute; default python/tests]
set -euo pipefail
out=${OUT:-/tmp}
root=$(pwd)
mkdir -p .deps/prefix
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/prefix; done
if compgen -G ".whl/fw/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fw-site .whl/fw/*.whl
  export PYTHONPATH=/tmp/fw-site
fi
started=$(date +%s)
cmake --preset gpu -DSNAPCACHE_PYTHON=ON >"$out/configure.log" 2>&1
cmake --build --preset gpu -j "$(nproc)" --target snapcache_python snapcache_cli >"$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; exit 1; }
echo "python-tests: module built in $(( $(date +%s) - started )) s"
export PYTHONPATH="$root/build/gpu/python/package${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import torch, transformers, diffusers, snapcache; print("python-tests: torch", torch.__version__,
  "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "diffusers", diffusers.__version__,
  "snapcache built for", snapcache.TORCH_BUILT)'
status=0
# From outside the source tree, as tools/python.sh does.
if [[ "${1:-}" != --no-tests ]]; then
  (cd /tmp && python3 -m pytest -q -p no:cacheprovider -rs "${@:-$root/python/tests}") 2>&1 |
    tee "$out/pytest.log" | tail -n 40 || status=$?
fi
if [[ -n "${FIRST_OUTPUT:-}" ]]; then
  PYTHONUNBUFFERED=1 python3 bench/first_output_bench.py --device cuda --repeats "$FIRST_OUTPUT" \
    --json "$out/first_output.json" 2>&1 | tee "$out/first_output.txt" || status=$?
fi
exit "$status"
