#!/usr/bin/env bash
# On the GPU machine, after tools/gpu/build-and-test.sh: the upload engine's options one at a time
# at each size (issue 21: where the warm upload loses to the bus), each load in a new process,
# beside the bus and the peers in the same run. Into $OUT: sweep.txt (the tables),
# sweep-stages.txt (each load's stage table) and sweep.jsonl (one JSON object per size and
# configuration).
#
#   SIZES="64 1024" RUNS=2 CONFIGS="t8:--threads,8 t32:--threads,32" bash tools/gpu/engine-sweep.sh
set -euo pipefail
out=${OUT:-/tmp}
sizes=${SIZES:-${SIZE:-16384}}
runs=${RUNS:-2}
bench=build/gpu/bench/snapcache_gpu_load_bench
if [[ -d .whl ]] && compgen -G ".whl/*.whl" >/dev/null; then
  pip install -q --no-index --no-deps --target /tmp/snapcache-peers .whl/*.whl 2>/dev/null
fi
run() {  # SIZE NAME ARGS...: one bench run
  local size=$1 name=$2; shift 2
  local work=/tmp/snapcache-bench-$size
  echo "== $size MiB, $name: $*" | tee -a "$out/sweep-stages.txt"
  "$bench" --size-mib "$size" --work-dir "$work" --runs "$runs" --json "$work.json" "$@" \
    2>>"$out/sweep-stages.txt"
  { printf '{"size_mib": %s, "config": "%s", "result": ' "$size" "$name"; cat "$work.json"; echo '}'; } |
    tr -d '\n' >>"$out/sweep.jsonl"
  echo >>"$out/sweep.jsonl"
}
{
  for size in $sizes; do
    run "$size" defaults --only "${DEFAULTS_ONLY:-cold,warm,warm-view-only}"
    # NAME:ARG,VALUE,ARG,VALUE... (commas for spaces)
    for cfg in ${CONFIGS:-t8:--threads,8 t16:--threads,16 c16:--chunk-mib,16 c32:--chunk-mib,32}; do
      name=${cfg%%:*} args=${cfg#*:}
      run "$size" "$name" --only "${CONFIG_ONLY:-warm,warm-view-only}" ${args//,/ }
    done
    if [[ -d /tmp/snapcache-peers && "${PEERS:-instanttensor_buffered}" != none ]]; then
      PYTHONPATH=/tmp/snapcache-peers python3 bench/peer_load_bench.py \
        "$(ls /tmp/snapcache-bench-$size/*.safetensors | head -n 1)" \
        --runs "$runs" --peers "${PEERS:-instanttensor_buffered}" --json "/tmp/snapcache-bench-$size-peers.json"
      { printf '{"size_mib": %s, "peers": ' "$size"; cat "/tmp/snapcache-bench-$size-peers.json"; echo '}'; } |
        tr -d '\n' >>"$out/sweep.jsonl"
      echo >>"$out/sweep.jsonl"
    fi
  done
} 2>&1 | tee "$out/sweep.txt"
