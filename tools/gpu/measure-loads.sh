#!/usr/bin/env bash
# On the GPU machine, after tools/gpu/build-and-test.sh (build/gpu exists), with .whl carried: the
# load benchmark of issue 21 at each size, in one run. For each size, snapcache's loads
# (bench/gpu_load_bench.cpp: the bus, cold, warm, view-only, ...) and then the peers a user could
# pick instead (bench/peer_load_bench.py: their PyPI wheels from .whl) on the same checkpoint,
# every load in a new process. Into $OUT: loads.txt (the tables), stages.txt (each load's stage
# table) and loads.jsonl (a JSON object per bench run), appended to by each call in one $OUT.
# ONLY must name cold for a size not yet published.
# DROP=1: the page cache is dropped before each load (and the disk's ceilings are measured), for
# snapcache and the peers alike. The GPU machine's disk is virtual, and its host keeps what was
# read: without a first pass every reader read faster than the one before it (2026-12-03), so
# each size's files are read once, untimed, before its first load, and every load then meets the
# host in the same state. TP=8: snapcache's loads of one rank of eight (the peers, which read the
# whole checkpoint, are then left out).
#
#   SIZES="64 300 1024 16384" RUNS=3 PEERS=safetensors,instanttensor_buffered ONLY=cold,warm,warm-view-only \
#     bash tools/gpu/measure-loads.sh
set -euo pipefail
out=${OUT:-/tmp}
sizes=${SIZES:-"1024 16384"}
runs=${RUNS:-3}
peers=${PEERS:-safetensors,instanttensor,instanttensor_buffered,fastsafetensors,runai}
only=()
[[ -n "${ONLY:-}" ]] && only=(--only "$ONLY")
drop=() peer_drop=()
[[ "${DROP:-0}" == 1 ]] && drop=(--drop-cache 1) peer_drop=(--drop-cache)
tp=${TP:-1}
[[ "$tp" != 1 ]] && peers=none
peer_dir=/tmp/snapcache-peers
if compgen -G ".whl/*.whl" >/dev/null; then
  pip install -q --no-index --no-deps --target "$peer_dir" .whl/*.whl
fi
for mib in $sizes; do
  work=/tmp/snapcache-bench-$mib
  if [[ "${DROP:-0}" == 1 && -d "$work" ]]; then
    find "$work" -type f -size +1M -exec cat {} + >/dev/null
  fi
  build/gpu/bench/snapcache_gpu_load_bench --size-mib "$mib" --tp-size "$tp" --work-dir "$work" --runs "$runs" \
    "${only[@]}" "${drop[@]}" --json "$work.json" 2>>"$out/stages.txt" | tee -a "$out/loads.txt"
  tr -d '\n' <"$work.json" >>"$out/loads.jsonl" && echo >>"$out/loads.jsonl"
  checkpoint=$(ls "$work"/*.safetensors | head -n 1)
  [[ "$peers" == none ]] && continue
  # One peer at a time, each with its own JSON line: a call cut short keeps the peers before the cut.
  for peer in ${peers//,/ }; do
    rm -f "$work-peers.json"
    PYTHONPATH=$peer_dir python3 bench/peer_load_bench.py "$checkpoint" --runs "$runs" --peers "$peer" \
      "${peer_drop[@]}" --json "$work-peers.json" | tee -a "$out/loads.txt" || echo "peer $peer failed: rc $?" | tee -a "$out/loads.txt"
    [[ -s "$work-peers.json" ]] || continue
    { printf '{"size_mib": %s, "peers": ' "$mib"; cat "$work-peers.json"; echo '}'; } | tr -d '\n' >>"$out/loads.jsonl"
    echo >>"$out/loads.jsonl"
  done
done
