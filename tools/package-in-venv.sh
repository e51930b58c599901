# Sourced by tools/check-torch.sh and tools/check-vllm.sh: the Python package installed into a venv
# whose torch is not the pinned one, as a user's `pip install .` installs it, then tests run against
# that installed package. Expects `root` (the source root) and the current directory there.

# install_package WHO PYTHON BUILD_DIR LOG_DIR: pip's default isolated build, in a build directory of
# its own (another torch than build/python's), ccache keys relative to the source root, CMake's
# default compiler name (as tools/python.sh). Sets build_seconds; on failure prints the log's tail and
# exits with pip's status.
install_package() {
  local who=$1 python=$2 build_dir=$3 log_dir=$4
  export CCACHE_BASEDIR="$root"
  export CXX="${CXX:-c++}"
  export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
  local started status=0
  started=$(date +%s)
  "$python" -m pip install --force-reinstall --no-deps -v --config-settings=build-dir="$build_dir" . \
    >"$log_dir/pip-install.log" 2>&1 || status=$?
  build_seconds=$(( $(date +%s) - started ))
  if (( status != 0 )); then
    tail -n 60 "$log_dir/pip-install.log"
    echo "$who: pip install failed ($status) after $build_seconds s; log: $log_dir/pip-install.log"
    exit "$status"
  fi
}

# run_tests PYTHON LOG_DIR TESTS [PYTEST ARGS...]: pytest from outside the source tree (so `import
# snapcache` is the installed package), its output also in LOG_DIR/pytest.log. Sets test_status
# (pytest's) and test_counts (its summary line, e.g. "12 passed, 1 skipped in 80.1s").
run_tests() {
  local python=$1 log_dir=$2 tests=$3
  shift 3
  test_status=0
  (cd /tmp && "$python" -m pytest -q -p no:cacheprovider "$tests" "$@") 2>&1 | tee "$log_dir/pytest.log" \
    || test_status=$?
  test_counts=$(grep -E '^(=+ )?[0-9]+ (passed|failed|errors?|skipped)' "$log_dir/pytest.log" | tail -n1 \
    | sed 's/^=* *//; s/ *=*$//')
  test_counts=${test_counts:-"no summary (see $log_dir/pytest.log)"}
}
