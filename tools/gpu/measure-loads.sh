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
# host in the same state (but see PRIME).
# TP=8: snapcache's loads of one rank of eight (the peers, which read the whole checkpoint, are
# then left out).
# ROUNDS=N: every load N times in turn (snapcache's, then the peers'; every second round the peers
# first, in reverse), RUNS runs each a round, so a ratio is taken within each round and its
# spread seen across them (the virtual disk's rate moved by 20-38% between calls minutes apart).
# At the end, bench/loads_table.py's tables of this call, round by round, go into loads.txt.
# PRIME=1 (with DROP=1): each load's files are read once, untimed, just before it (gpu_load_bench's
# --prime 1, peer_load_bench.py's --prime), so every loader meets the disk's host having just read
# its file; the first pass is then left out. DISK: which disk rows (gpu_load_bench's --disk).
#
#   SIZES="64 300 1024 16384" RUNS=3 PEERS=safetensors,instanttensor_buffered ONLY=cold,warm,warm-view-only \
#     bash tools/gpu/measure-loads.sh
#   DROP=1 PRIME=1 ROUNDS=3 RUNS=1 SIZES=16384 ONLY=warm DISK=dd,checkpoint-dd \
#     PEERS=fastsafetensors,instanttensor_buffered bash tools/gpu/measure-loads.sh
set -euo pipefail
out=${OUT:-/tmp}
sizes=${SIZES:-"1024 16384"}
runs=${RUNS:-3}
rounds=${ROUNDS:-1}
peers=${PEERS:-safetensors,instanttensor,instanttensor_buffered,fastsafetensors,runai}
only=()
[[ -n "${ONLY:-}" ]] && only=(--only "$ONLY")
drop=() peer_drop=()
[[ "${DROP:-0}" == 1 ]] && drop=(--drop-cache 1) peer_drop=(--drop-cache)
[[ "${DROP:-0}" == 1 && "${PRIME:-0}" == 1 ]] && drop+=(--prime 1) peer_drop+=(--prime)
[[ -n "${DISK:-}" ]] && drop+=(--disk "$DISK")
tp=${TP:-1}
[[ "$tp" != 1 ]] && peers=none
peer_dir=/tmp/snapcache-peers
if compgen -G ".whl/*.whl" >/dev/null; then
  pip install -q --no-index --no-deps --target "$peer_dir" .whl/*.whl
fi
started=$(date +%s)
this_call=$(mktemp)  # this call's JSON lines, for the tables at the end
# A JSON object (stdin) onto one line, tagged with this call and round, into loads.jsonl.
append() {
  local line
  line=$({ printf '{"started": %s, "round": %s, ' "$started" "$round"; tail -c +2; } | tr -d '\n')
  echo "$line" | tee -a "$out/loads.jsonl" >>"$this_call"
}
snapcache_loads() {
  build/gpu/bench/snapcache_gpu_load_bench --size-mib "$mib" --tp-size "$tp" --work-dir "$work" --runs "$runs" \
    "${only[@]}" "${drop[@]}" --json "$work.json" 2>>"$out/stages.txt" | tee -a "$out/loads.txt"
  append <"$work.json"
}
# One peer at a time, each with its own JSON line: a call cut short keeps the peers before the cut.
# Its output is checked against the checkpoint's bytes in the first round (not again after it).
peer_load() {
  local check=()
  ((round > 1)) && check=(--no-check)
  rm -f "$work-peers.json"
  PYTHONPATH=$peer_dir python3 bench/peer_load_bench.py "$checkpoint" --runs "$runs" --peers "$1" \
    "${peer_drop[@]}" "${check[@]}" --json "$work-peers.json" | tee -a "$out/loads.txt" || echo "peer $1 failed: rc $?" | tee -a "$out/loads.txt"
  [[ -s "$work-peers.json" ]] || return 0
  { printf '{"size_mib": %s, "peers": ' "$mib"; cat "$work-peers.json"; echo '}'; } | append
}
order=${peers//,/ }
[[ "$peers" == none ]] && order=""
for mib in $sizes; do
  work=/tmp/snapcache-bench-$mib
  if [[ "${DROP:-0}" == 1 && "${PRIME:-0}" != 1 && -d "$work" ]]; then
    find "$work" -type f -size +1M -exec cat {} + >/dev/null
  fi
  for ((round = 1; round <= rounds; round++)); do
    if ((round % 2 == 1)); then
      snapcache_loads  # the first round's cold load writes the checkpoint and publishes the entry
      checkpoint=$(ls "$work"/*.safetensors | head -n 1)
      for peer in $order; do peer_load "$peer"; done
    else
      for peer in $(printf '%s\n' $order | tac); do peer_load "$peer"; done
      snapcache_loads
    fi
  done
done
if ((rounds > 1)); then
  python3 bench/loads_table.py "$this_call" | tee -a "$out/loads.txt"
fi
rm -f "$this_call"
