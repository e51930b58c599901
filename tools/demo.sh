#!/usr/bin/env bash
# README's main job. Builds if needed, then runs the snapcache command.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ ! -x build/default/tools/snapcache/snapcache ]; then
  bash tools/setup.sh
  cmake --preset default >/dev/null
fi
cmake --build --preset default >/dev/null
exec build/default/tools/snapcache/snapcache "${@:---version}"
