#!/usr/bin/env bash
# The sanitizer jobs of CI (.ci/run), each in its own build folder:
#   scripts/sanitize.sh asan [BUILD_DIR]   the whole suite (GoogleTest + the Python checks that drive
#                                          the CLI) built with ASan + UBSan (FOVEA_SANITIZE): memory
#                                          errors, UB (it aborts) and leaks fail the test that hit them
#   scripts/sanitize.sh tsan [BUILD_DIR]   the threaded tests (CTest label tsan) built with TSan
#                                          (FOVEA_TSAN): any data race fails
# Builds are lean: no benchmarks, no Python module (its pytest tests run in the plain suite; an
# uninstrumented CPython cannot load an instrumented module without preloading the runtime).
# The ASan build uses clang 14 with -DFOVEA_FUZZ=ON as well: the library is compiled once with
# ASan + UBSan + libFuzzer's coverage, the suite runs against it, and scripts/fuzz.sh
# --build-dir build-asan links the fuzz targets against the same objects (CI builds the library
# once for both). The TSan build leaves out Vulkan (no tsan test uses it; lavapipe's threads are
# not instrumented) and its shaders. Suppressions, narrow and explained: tests/sanitizer/*.supp.
# SANITIZE_BUILD_ONLY=1: configure and build, run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
kind=${1:-}
case "$kind" in
  asan)
    dir=${2:-build-asan}
    cc=$(command -v clang-14 || command -v clang) cxx=$(command -v clang++-14 || command -v clang++)
    flags=(-DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DFOVEA_SANITIZE=ON -DFOVEA_FUZZ=ON) ;;
  tsan) dir=${2:-build-tsan}; flags=(-DFOVEA_TSAN=ON -DFOVEA_WITH_VULKAN=OFF) ;;
  *) echo "sanitize.sh: error: expected 'asan' or 'tsan', got '${kind}'" >&2; exit 2 ;;
esac
bash scripts/install-deps.sh test
flags+=(-DFOVEA_BUILD_TESTS=ON -DFOVEA_BUILD_BENCH=OFF -DFOVEA_BUILD_PYTHON=OFF -DFOVEA_DEBUG_INFO=lines)
if [ -f "$dir/CMakeCache.txt" ]; then
  bash scripts/build.sh "$dir"   # configured: keep its compiler (CMake cannot switch it in place)
else
  bash scripts/build.sh "$dir" "${flags[@]}"
fi
[ "${SANITIZE_BUILD_ONLY:-0}" = 1 ] && exit 0
jobs=$(nproc)
if [ "$kind" = asan ]; then
  # abort_on_error: a finding is a crash the test reports; detect_leaks: LSan at every exit
  # (the CLI runs the tests spawn included).
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:halt_on_error=1:strict_string_checks=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/sanitizer/lsan.supp:print_suppressions=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # Left out: the two tests that run the store benchmark through the CLI (fovea store-bench,
  # every backend, thousands of binds): 8 and >15 minutes under ASan on a loaded 2-core
  # machine. The store code they drive runs under ASan in StoreBackendTest, StoreFaultTest and
  # StoreBindModes on every backend; the plain suite runs them.
  ctest --test-dir "$dir" -L asan -E '^StoreCli\.StoreBench' --output-on-failure -j "$jobs"
else
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizer/tsan.supp}
  ctest --test-dir "$dir" -L tsan --output-on-failure -j "$jobs"
fi
