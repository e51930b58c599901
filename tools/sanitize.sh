#!/usr/bin/env bash
# Every CPU test under AddressSanitizer and UndefinedBehaviorSanitizer, leaks checked: the store's
# layers and the torch ones (torch front end, loaders, the upload engine's host half, pipeline),
# the CLI run as a user runs it, the demo model's loads and the installed package's consumer; the
# multi-process, fault, power-loss, corruption and soak harnesses included (their short CI forms).
# Our code is instrumented; libtorch stays the prebuilt wheel. The `sanitize` presets
# (CMakePresets.json) build at -O1 -g1 (half the compile time of -O2 -g, line numbers still in
# every report) and leave out what no CPU test runs: benches, the demo program, the GPU tests.
# Warnings are not errors here: GCC 12 warns falsely (maybe-uninitialized) inside std::regex under
# ASan; the ordinary build keeps -Werror. Leaks that only third-party libraries may have are
# suppressed in tools/sanitize/lsan.supp, each with its reason.
# On a machine with a CUDA driver, add protect_shadow_gap=0 to ASAN_OPTIONS (CUDA maps memory
# where ASan keeps its shadow gap); without one, as in CI, it is not needed.
#   bash tools/sanitize.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize
ctest --preset sanitize
