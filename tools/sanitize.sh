#!/usr/bin/env bash
# The store's layers (util, format, store: everything that reads the untrusted cache directory)
# and their tests, built with AddressSanitizer and UndefinedBehaviorSanitizer, leaks checked, all
# tests run, the multi-process, fault, power-loss, corruption and soak harnesses included. The
# layers with libtorch are left out here: a sanitized libtorch build costs more than CI can give.
# Warnings are not errors here: GCC 12 warns falsely (maybe-uninitialized) inside std::regex
# under ASan; the ordinary build keeps -Werror.
#   bash tools/sanitize.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=build/sanitize-core
cmake -S . -B "$build" -G Ninja -DSNAPCACHE_CORE_ONLY=ON -DSNAPCACHE_SANITIZE=ON -DSNAPCACHE_WERROR=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
