#!/usr/bin/env bash
# Builds the libFuzzer targets of the decoders (manifest, key, stamp, safetensors header, archive) with clang, seeds
# them from a real published entry and runs each for SECONDS (default 20). A crash, hang, leak or
# sanitizer report fails the script and leaves the input under build/fuzz/artifacts/.
#   bash tools/fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-20}
build=build/fuzz
cmake -S . -B "$build" -G Ninja -DSNAPCACHE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build"
corpus="$build/corpus"
"$build/tests/fuzz/snapcache_fuzz_seeds" "$corpus"
mkdir -p "$build/artifacts"
for target in manifest key stamp safetensors archive; do
  echo "fuzz: $target for ${seconds}s"
  log="$build/artifacts/$target.log"
  if ! "$build/tests/fuzz/snapcache_${target}_fuzz" "$corpus/$target" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$build/artifacts/$target-" -print_final_stats=1 \
      >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz: $target found a problem; the input is in $build/artifacts/" >&2
    exit 1
  fi
  grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$log" || true
done
