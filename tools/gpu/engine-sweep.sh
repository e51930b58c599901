#!/usr/bin/env bash
# On the GPU machine, after tools/gpu/build-and-test.sh: the upload engine's options one at a time
# at one size (issue 21: where the warm upload loses to the bus), each load in a new process,
# beside the bus and the fastest peer in the same run. Into $OUT: sweep.txt (the tables),
# sweep-stages.txt (each load's stage table) and sweep.jsonl (one JSON object per configuration).
#
#   SIZE=16384 RUNS=2 CONFIGS="share0:--direct-share,0 t32:--threads,32" bash tools/gpu/engine-sweep.sh
set -euo pipefail
out=${OUT:-/tmp}
size=${SIZE:-16384}
runs=${RUNS:-2}
work=/tmp/snapcache-bench-$size
bench=build/gpu/bench/snapcache_gpu_load_bench
run() {  # NAME ARGS...: one bench run
  local name=$1; shift
  echo "== $name: $*" | tee -a "$out/sweep-stages.txt"
  "$bench" --size-mib "$size" --work-dir "$work" --runs "$runs" --json "$work.json" "$@" \
    2>>"$out/sweep-stages.txt"
  { printf '{"config": "%s", "result": ' "$name"; cat "$work.json"; echo '}'; } | tr -d '\n' >>"$out/sweep.jsonl"
  echo >>"$out/sweep.jsonl"
}
{
  run defaults --only cold,warm,warm-view-only,warm-unchecked
  # NAME:ARG,VALUE,ARG,VALUE... (commas for spaces)
  for cfg in ${CONFIGS:-share0:--direct-share,0 share25:--direct-share,0.25 share60:--direct-share,0.6 share100:--direct-share,1}; do
    name=${cfg%%:*} args=${cfg#*:}
    run "$name" --only warm,warm-view-only ${args//,/ }
  done
  if [[ -d .whl ]]; then
    pip install -q --no-index --no-deps --target /tmp/snapcache-peers .whl/*.whl 2>/dev/null
    PYTHONPATH=/tmp/snapcache-peers python3 bench/peer_load_bench.py "$(ls "$work"/*.safetensors | head -n 1)" \
      --runs "$runs" --peers "${PEERS:-instanttensor_buffered}" --json "$work-peers.json"
  fi
} 2>&1 | tee "$out/sweep.txt"
