#!/usr/bin/env bash
# On the GPU machine, after tools/gpu/build-and-test.sh (build/gpu exists), with .whl carried: the
# load benchmark of issue 21 at each size, in one run. For each size, snapcache's loads
# (bench/gpu_load_bench.cpp: the bus, cold, warm, view-only, ...) and then the peers a user could
# pick instead (bench/peer_load_bench.py: their PyPI wheels from .whl) on the same checkpoint,
# every load in a new process. Tables and JSON go to $OUT. ONLY must name cold for a size not yet published.
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
peer_dir=/tmp/snapcache-peers
if compgen -G ".whl/*.whl" >/dev/null; then
  pip install -q --no-index --no-deps --target "$peer_dir" .whl/*.whl
fi
for mib in $sizes; do
  work=/tmp/snapcache-bench-$mib
  build/gpu/bench/snapcache_gpu_load_bench --size-mib "$mib" --work-dir "$work" --runs "$runs" "${only[@]}" \
    --json "$out/load-$mib.json" 2>"$out/load-$mib.stages.txt" | tee "$out/load-$mib.txt"
  checkpoint=$(ls "$work"/*.safetensors | head -n 1)
  [[ "$peers" == none ]] && continue
  PYTHONPATH=$peer_dir python3 bench/peer_load_bench.py "$checkpoint" --runs "$runs" --peers "$peers" \
    --json "$out/peers-$mib.json" | tee "$out/peers-$mib.txt"
done
