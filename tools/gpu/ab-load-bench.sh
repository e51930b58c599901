#!/usr/bin/env bash
# On the GPU machine, with .deps carried: a change's effect on loads, measured on one machine in
# one call, since machines differ more than most changes do. The load bench (which holds the
# library statically) is built from the tree as it is (new), then once per variant with that
# variant's files copied over the tree's (files the tree lacks are added for its build and removed
# after it). The binaries' loads then alternate, ROUNDS times (warm loads, best of 3 each round,
# each a new process), then COLD_ROUNDS cold loads each. Into $OUT, two files (the device tool
# brings back only a few): ab.txt (the bench's lines, each led by its round and variant) and
# stages.txt (each load's stage table with SNAPCACHE_LOG=debug, and what the load wrote to stderr,
# in blocks headed by round and variant).
#
# Make a variant here, from the revision to compare against, and carry it (an ignored folder such
# as out/):
#   rev=ceb26ef; for f in $(git diff --name-only --diff-filter=M $rev -- src include); do
#     mkdir -p out/old/$(dirname $f); git show $rev:$f > out/old/$f; done
#   VARIANTS="old:out/old" SIZE=16384 TP=8 ROUNDS=4 bash tools/gpu/ab-load-bench.sh
# OLD=out/old alone means VARIANTS="old:out/old". A variant may also be the new tree with one
# change taken out, or with timing lines added (its own files, any number of them). A variant whose
# folder is a whole tree (a CMakeLists.txt and src/: another commit, `git archive REV | tar -x -C
# out/base`, when files moved between the two) is built on its own, in its folder's build/gpu.
# BUDGET (seconds, default 540) stops the rounds where the device tool's limit would cut them.
set -euo pipefail
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
out=${OUT:-/tmp}
variants=${VARIANTS:-${OLD:+old:$OLD}}
[[ -n "$variants" ]] || { echo "VARIANTS names name:folder pairs of files to build against (or OLD a folder)" >&2; exit 1; }
size=${SIZE:-16384} tp=${TP:-8} rounds=${ROUNDS:-4} cold_rounds=${COLD_ROUNDS:-1} only=${ONLY:-warm,warm-view-only}
budget=${BUDGET:-540}
work=/tmp/snapcache-bench-$size
bin=build/gpu/bench/snapcache_gpu_load_bench
mkdir -p .deps/prefix
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/prefix; done
cmake --preset gpu >/dev/null
cmake --build --preset gpu -j "$(nproc)" --target snapcache_gpu_load_bench | tail -n 1
# The binaries and the tree's saved files in a directory of this run's own, removed at the end.
ab=$(mktemp -d /tmp/snapcache-ab.XXXXXX)
cp "$bin" "$ab/new"
names=(new)

# Copies a variant's files over the tree's, keeping the tree's (and the list of files it lacked)
# under $saved, so restore puts the tree back as it was, also when the build fails.
saved=$ab/tree
restore() {
  [[ -d "$saved" ]] || return 0
  (cd "$saved/files" && find . -type f) | while read -r f; do cp "$saved/files/$f" "$f"; done
  while read -r f; do rm -f "$f"; done <"$saved/added"
  rm -rf "$saved"
}
trap 'restore; rm -rf "$ab"' EXIT
for pair in $variants; do
  name=${pair%%:*} dir=${pair#*:}
  [[ "$name" != "$pair" && -d "$dir" ]] || { echo "variant '$pair' is not name:folder" >&2; exit 1; }
  if [[ -f "$dir/CMakeLists.txt" && -d "$dir/src" ]]; then
    ln -sfn "$PWD/.deps" "$dir/.deps"
    (cd "$dir" && cmake --preset gpu >/dev/null && cmake --build --preset gpu -j "$(nproc)" --target snapcache_gpu_load_bench |
      tail -n 1)
    cp "$dir/$bin" "$ab/$name"
    names+=("$name")
    continue
  fi
  mkdir -p "$saved/files" && : >"$saved/added"
  (cd "$dir" && find . -type f) | while read -r f; do
    if [[ -f "$f" ]]; then
      mkdir -p "$saved/files/$(dirname "$f")"
      cp "$f" "$saved/files/$f"
    else
      echo "$f" >>"$saved/added"
    fi
    mkdir -p "$(dirname "$f")"
    cp "$dir/$f" "$f"
  done
  cmake --build --preset gpu -j "$(nproc)" --target snapcache_gpu_load_bench | tail -n 1
  cp "$bin" "$ab/$name"
  restore
  if cmp -s "$ab/new" "$ab/$name"; then echo "variant $name builds the same binary as the tree" >&2; exit 1; fi
  names+=("$name")
done
trap 'rm -rf "$ab"' EXIT
echo "built ${names[*]} in $(elapsed) s"

export SNAPCACHE_LOG=debug
# Makes the checkpoint (once per machine) and the entry each variant's warm loads read (variants
# whose keys differ, another format version or loader source, read entries of their own).
# COLD_FIRST=0 leaves the entries an earlier call of this script published on this machine.
if [[ "${COLD_FIRST:-1}" == 1 ]]; then
  for v in "${names[@]}"; do
    "$ab/$v" --size-mib "$size" --work-dir "$work" --tp-size "$tp" --runs 1 --only cold >/dev/null 2>&1
  done
fi
echo "entries ready in $(elapsed) s"
one_run() {  # round variant loads runs
  local label="$1 $2"
  echo "== $label" >>"$out/stages.txt"
  "$ab/$2" --size-mib "$size" --work-dir "$work" --tp-size "$tp" --runs "$4" --only "$3" 2>>"$out/stages.txt" |
    { grep -E "^(warm|cold|pinned)" || true; } | sed "s/^/$label /" | tee -a "$out/ab.txt"
}
for ((i = 1; i <= rounds; ++i)); do
  for v in "${names[@]}"; do
    (($(elapsed) < budget)) || { echo "budget of ${budget} s spent in round $i" | tee -a "$out/ab.txt"; break 2; }
    one_run "$i" "$v" "$only" 3
  done
done
# A cold load empties the cache first; each variant's publishes the entry the next one replaces.
for ((i = 1; i <= cold_rounds; ++i)); do
  for v in "${names[@]}"; do
    (($(elapsed) < budget)) || { echo "budget of ${budget} s spent in cold round $i" | tee -a "$out/ab.txt"; break 2; }
    one_run "cold$i" "$v" cold 1
  done
done
echo "done in $(elapsed) s"
