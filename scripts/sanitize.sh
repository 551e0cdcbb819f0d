#!/usr/bin/env bash
# The sanitizer jobs of CI (.ci/run), each in its own build folder:
#   scripts/sanitize.sh asan [BUILD_DIR]   the whole suite (GoogleTest + Python checks) built with
#                                          ASan + UBSan (FOVEA_SANITIZE): memory errors, UB (it aborts)
#                                          and leaks fail the test that hit them
#   scripts/sanitize.sh tsan [BUILD_DIR]   the threaded tests (CTest label tsan) built with TSan
#                                          (FOVEA_TSAN): any data race fails
# Benchmarks are not built. Suppressions, narrow and explained: tests/sanitizer/*.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
kind=${1:-}
case "$kind" in
  asan) dir=${2:-build-asan}; flags=(-DFOVEA_SANITIZE=ON) ;;
  tsan) dir=${2:-build-tsan}; flags=(-DFOVEA_TSAN=ON) ;;
  *) echo "sanitize.sh: error: expected 'asan' or 'tsan', got '${kind}'" >&2; exit 2 ;;
esac
bash scripts/install-deps.sh test
bash scripts/build.sh "$dir" "${flags[@]}" -DFOVEA_BUILD_BENCH=OFF
jobs=$(nproc)
if [ "$kind" = asan ]; then
  # abort_on_error: a finding is a crash the test reports; detect_leaks: LSan at every exit
  # (the CLI runs the tests spawn included).
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:halt_on_error=1:strict_string_checks=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/sanitizer/lsan.supp:print_suppressions=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  ctest --test-dir "$dir" -L asan --output-on-failure -j "$jobs"
else
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizer/tsan.supp}
  ctest --test-dir "$dir" -L tsan --output-on-failure -j "$jobs"
fi
