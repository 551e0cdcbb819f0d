#!/usr/bin/env bash
# The whole test suite: installs what the tests need, builds everything (library, CLI, tests,
# benchmarks), runs CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh test
bash scripts/build.sh build -DFOVEA_BUILD_TESTS=ON -DFOVEA_BUILD_BENCH=ON -DFOVEA_DEBUG_INFO=lines
ctest --test-dir build --output-on-failure -j "$(nproc)"
