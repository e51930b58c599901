#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with .deps carried: unpacks the carried Debian
# packages into .deps/prefix (never into /), builds with the `gpu` preset against the machine's own
# torch, and runs every test, GPU ones included. Logs go to $OUT when it is set.
set -euo pipefail
out=${OUT:-/tmp}
mkdir -p .deps/prefix
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/prefix; done
cmake --preset gpu 2>&1 | tee "$out/configure.log" | grep -E "snapcache:|Catch2|Found Torch|Error" || true
cmake --build --preset gpu -j "$(nproc)" 2>&1 | tee "$out/build.log" | tail -n 3
# The installed library (the consumer_package test) finds the carried shared libraries (libsodium,
# which this machine lacks) as it would on a machine that has them installed.
export LD_LIBRARY_PATH="$PWD/.deps/prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SNAPCACHE_UNICODE_DATA="$PWD/.deps/prefix/usr/share/unicode" ctest --preset gpu 2>&1 | tee "$out/ctest.log" | tail -n 25
