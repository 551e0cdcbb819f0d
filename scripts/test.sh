#!/usr/bin/env bash
# The whole test suite: installs what the tests need, builds, runs CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh test
bash scripts/build.sh build
ctest --test-dir build --output-on-failure -j "$(nproc)"
