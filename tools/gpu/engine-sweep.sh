#!/usr/bin/env bash
# On the GPU machine, after tools/gpu/build-and-test.sh: the upload engine's options one at a time
# at one size (issue 21: where the warm upload loses to the bus), each load in a new process,
# beside the bus and the fastest peer in the same run. Tables, stage tables and JSON go to $OUT.
#
#   SIZE=16384 RUNS=2 bash tools/gpu/engine-sweep.sh
set -euo pipefail
out=${OUT:-/tmp}
size=${SIZE:-16384}
runs=${RUNS:-2}
work=/tmp/snapcache-bench-$size
bench=build/gpu/bench/snapcache_gpu_load_bench
run() {  # NAME ARGS...: one bench run, its table to $OUT/sweep-NAME.txt
  local name=$1; shift
  echo "== $name: $*"
  "$bench" --size-mib "$size" --work-dir "$work" --runs "$runs" --json "$out/sweep-$name.json" "$@" \
    2>"$out/sweep-$name.stages.txt" | tee "$out/sweep-$name.txt"
}
run defaults --only cold,warm,warm-view-only,warm-unchecked
# threads x buffer size, the pool holding two buffers per thread
for cfg in 8:16 16:8 16:32 24:16 32:8 32:16; do
  t=${cfg%:*} c=${cfg#*:}
  run "t$t-c$c" --only warm-view-only,warm-unchecked --threads "$t" --chunk-mib "$c" --pinned-mib $((2 * t * c))
done
if [[ -d .whl ]]; then
  pip install -q --no-index --no-deps --target /tmp/snapcache-peers .whl/*.whl
  PYTHONPATH=/tmp/snapcache-peers python3 bench/peer_load_bench.py "$(ls "$work"/*.safetensors | head -n 1)" \
    --runs "$runs" --peers instanttensor_buffered,instanttensor --json "$out/sweep-peers.json" | tee "$out/sweep-peers.txt"
fi
