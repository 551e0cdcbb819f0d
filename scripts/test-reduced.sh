#!/usr/bin/env bash
# The reduced configuration: a tokenize-only build (no encoder, no Vulkan) that must build and
# pass its own tests. CI runs it after the full suite (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh test
bash scripts/build.sh build-reduced -DFOVEA_WITH_ENCODER=OFF -DFOVEA_WITH_VULKAN=OFF -DFOVEA_BUILD_BENCH=OFF \
  -DFOVEA_BUILD_TESTS=ON
grep -q 'FOVEA_BUILT_WITH_ENCODER 0' build-reduced/generated/fovea/version_gen.hpp
grep -q 'FOVEA_BUILT_WITH_VULKAN 0' build-reduced/generated/fovea/version_gen.hpp
ctest --test-dir build-reduced --output-on-failure -j "$(nproc)"
