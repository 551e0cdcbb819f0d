#!/usr/bin/env bash
# The whole test suite: installs what the tests need, builds everything (library, CLI, tests,
# benchmarks), runs CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh test
bash scripts/build.sh build -DFOVEA_BUILD_TESTS=ON -DFOVEA_BUILD_BENCH=ON -DFOVEA_DEBUG_INFO=lines
# Two tests per core: many wait on child processes (the CLI, Python), lavapipe or files. Measured
# on 2 cores: 160 s at -j2, 113 s at -j4 in a build folder with ctest's timing history; no gain
# (161 s) in a fresh clone, which has none (docs/how-to/build.md).
# The hostile-input sweeps (label sweep: minutes each, every case in a child process) run in their
# own CI step (.ci/run); `ctest --test-dir build -L sweep` runs them here.
ctest --test-dir build --output-on-failure -j "$(( $(nproc) * 2 ))" -LE sweep
