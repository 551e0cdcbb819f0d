#!/usr/bin/env bash
# Configures and builds fovea:
#   scripts/build.sh [BUILD_DIR] [extra CMake arguments...] [-- extra build arguments...]
# e.g. scripts/build.sh build-min -DFOVEA_WITH_ENCODER=OFF -DFOVEA_WITH_VULKAN=OFF -- --target fovea_cli
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
configure_args=()
build_args=()
while [ "$#" -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; build_args=("$@"); break; fi
  configure_args+=("$1"); shift
done
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
# ccache (when installed) keeps rebuilds of unchanged sources cheap, across build folders and
# git worktrees too (paths under the repository are hashed relative to it).
if command -v ccache >/dev/null 2>&1; then
  generator+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  # The tests and the CLI use precompiled headers (CMake's -include cmake_pch.hxx); ccache caches
  # such compiles only with this sloppiness (its manual, "Precompiled headers").
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  # Depend mode: ccache hashes the compiler's own -MD dependency list instead of running the
  # preprocessor first. On an empty cache (a fresh machine: CI) the preprocessor pass was all
  # ccache added, ~25 % of every compile and ~2 s per precompiled-header source (docs/how-to/build.md).
  export CCACHE_DEPEND=${CCACHE_DEPEND:-1}
fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${configure_args[@]}"
elif [ "${#configure_args[@]}" -gt 0 ]; then
  cmake -S . -B "$build_dir" "${configure_args[@]}"
fi
cmake --build "$build_dir" -j "$(nproc)" "${build_args[@]}"
