#!/usr/bin/env bash
# The reliability jobs of CI (.ci/run runs them after the plain suite), benchmarks
# and the Python module not built:
#   scripts/sanitize.sh asan                       the whole suite under ASan + UBSan (label asan), in
#                                                  build-asan: clang, the library also instrumented for libFuzzer
#   scripts/fuzz.sh --build-dir build-asan --seconds 30
#                                                  every libFuzzer target, 30 s each, linked against the
#                                                  same build (no second library build)
#   scripts/sanitize.sh tsan                       the threaded tests under TSan (label tsan), in build-tsan
# Any finding fails the run. FOVEA_CI_FUZZ_SECONDS changes the fuzzing time per target.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== ci-extended: $* ($(date -u +%H:%M:%S))"; }
step "ASan + UBSan suite"
bash scripts/sanitize.sh asan
step "fuzz targets, ${FOVEA_CI_FUZZ_SECONDS:-30} s each"
bash scripts/fuzz.sh --build-dir build-asan --seconds "${FOVEA_CI_FUZZ_SECONDS:-30}"
step "TSan threaded tests"
bash scripts/sanitize.sh tsan
step "done"
