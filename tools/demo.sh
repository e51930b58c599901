#!/usr/bin/env bash
# README's main job: the demo. Builds on first use (installing what is missing), then generates a
# small DiT-like checkpoint, loads one TP rank cold and warm, and proves the results bit-identical.
# Flags go to snapcache-demo (--help lists them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ ! -f build/default/build.ninja ]; then
  bash tools/setup.sh
  cmake --preset default >/dev/null
fi
cmake --build --preset default --target snapcache_demo snapcache_cli >/dev/null
exec build/default/tools/demo/snapcache-demo "$@"
