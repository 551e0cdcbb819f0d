#!/usr/bin/env bash
# The reduced configuration: a tokenize-only build (no encoder, no Vulkan, no FFmpeg: PNG and JPEG
# only), as shared libraries,
# that must build and pass its own tests (the installed-tree consumer included, so the shared
# install is checked too). CI runs it after the full suite (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh test
bash scripts/build.sh build-reduced -DFOVEA_WITH_ENCODER=OFF -DFOVEA_WITH_VULKAN=OFF -DFOVEA_WITH_FFMPEG=OFF -DFOVEA_BUILD_BENCH=OFF -DFOVEA_DEBUG_INFO=lines \
  -DFOVEA_BUILD_TESTS=ON -DBUILD_SHARED_LIBS=ON
grep -q 'FOVEA_BUILT_WITH_ENCODER 0' build-reduced/generated/fovea/version_gen.hpp
grep -q 'FOVEA_BUILT_WITH_VULKAN 0' build-reduced/generated/fovea/version_gen.hpp
grep -q 'FOVEA_BUILT_WITH_FFMPEG 0' build-reduced/generated/fovea/version_gen.hpp
ctest --test-dir build-reduced --output-on-failure -j "$(( $(nproc) * 2 ))"
