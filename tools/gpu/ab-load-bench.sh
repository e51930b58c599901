#!/usr/bin/env bash
# On the GPU machine, with .deps carried: one change's effect on warm loads, measured on one machine
# in one call, since machines differ more than most changes do. The load bench (which holds the
# library statically) is built from the tree as it is (new), then again with the files under $OLD
# copied over theirs (old); the two binaries' loads then alternate, ROUNDS times, each a new
# process. Into $OUT: ab.txt (the bench's tables, each line led by new or old) and
# stages-new.txt, stages-old.txt (each load's stage table with SNAPCACHE_LOG=debug).
#
# Make $OLD here, from the revision to compare against, and carry it (an ignored folder such as out/):
#   rev=ceb26ef; for f in $(git diff --name-only --diff-filter=M $rev -- src include); do
#     mkdir -p out/old/$(dirname $f); git show $rev:$f > out/old/$f; done
#   OLD=out/old SIZE=16384 TP=8 ROUNDS=4 bash tools/gpu/ab-load-bench.sh
# Files the change only modified (--diff-filter=M): every file in $OLD must be in the tree, and
# files the change added stay as they are (the old build fails if they need the new ones). The
# tree's own files are put back after the old build, also when it fails.
set -euo pipefail
out=${OUT:-/tmp}
old=${OLD:?OLD names a folder of old files at their paths in the repository}
size=${SIZE:-16384} tp=${TP:-8} rounds=${ROUNDS:-4} only=${ONLY:-warm,warm-view-only}
work=/tmp/snapcache-bench-$size
bin=build/gpu/bench/snapcache_gpu_load_bench
mkdir -p .deps/prefix
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/prefix; done
cmake --preset gpu >/dev/null
cmake --build --preset gpu -j "$(nproc)" --target snapcache_gpu_load_bench | tail -n 1
mkdir -p /tmp/ab && cp "$bin" /tmp/ab/new
saved=/tmp/ab/tree
rm -rf "$saved"
restore() { (cd "$saved" && find . -type f) | while read -r f; do cp "$saved/$f" "$f"; done; }
trap restore EXIT
(cd "$old" && find . -type f) | while read -r f; do
  [[ -f "$f" ]] || { echo "$f is not in the tree: compare against a revision that has it" >&2; exit 1; }
  mkdir -p "$saved/$(dirname "$f")"
  cp "$f" "$saved/$f"
  cp "$old/$f" "$f"
done
cmake --build --preset gpu -j "$(nproc)" --target snapcache_gpu_load_bench | tail -n 1
cp "$bin" /tmp/ab/old
restore
trap - EXIT
if cmp -s /tmp/ab/new /tmp/ab/old; then echo "the two builds are the same binary: nothing to compare" >&2; exit 1; fi
export SNAPCACHE_LOG=debug
/tmp/ab/new --size-mib "$size" --work-dir "$work" --tp-size "$tp" --runs 1 --only cold >/dev/null 2>&1
for ((i = 1; i <= rounds; ++i)); do
  for v in new old; do
    /tmp/ab/$v --size-mib "$size" --work-dir "$work" --tp-size "$tp" --runs 3 --only "$only" \
      2>>"$out/stages-$v.txt" | sed "s/^/$v /" | tee -a "$out/ab.txt"
  done
done
