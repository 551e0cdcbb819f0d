#!/usr/bin/env bash
# The out-of-tree consumer test: installs the build tree into a temporary prefix, then builds
# and runs a small project against it twice, through the CMake package (tests/consumer) and
# through pkg-config, as a user would. Usage: consumer.sh BUILD_DIR SOURCE_DIR WORK_DIR IMAGE
set -euo pipefail
build=$1 src=$2 work=$3 image=$4
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/fovea/tokenize.hpp include/fovea/tokenizer.hpp include/fovea/version_gen.hpp lib/cmake/fovea/foveaConfig.cmake \
         lib/pkgconfig/fovea.pc bin/fovea libexec/fovea/fovea-main; do
  [ -e "$prefix/$f" ] || { echo "consumer: the install has no $f"; exit 1; }
done
# Private headers stay private.
if [ -e "$prefix/include/extract/batch.hpp" ] || [ -e "$prefix/include/fovea/store_bench.hpp" ]; then
  echo "consumer: a private header was installed"; exit 1
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$src/tests/consumer" -B "$work/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log"
cmake --build "$work/build" -j 2 >"$work/build.log"
"$work/build/tokenize_only" "$image"
if [ -x "$work/build/encode_one" ]; then "$work/build/encode_one" "$image"; fi

# pkg-config, static: the same program, no CMake.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
c++ -std=c++20 -O1 -o "$work/tokenize_only_pc" "$src/tests/consumer/tokenize_only.cpp" \
  $(pkg-config --cflags fovea) $(pkg-config --libs --static fovea)
LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$work/tokenize_only_pc" "$image"
"$prefix/bin/fovea" --version
# The launcher found the installed CLI and chose the OpenMP wait policy for it.
"$prefix/bin/fovea" tokenize "$image" --budget 16 -o "$work/launched.safetensors" --json >"$work/launched.json"
[ -s "$work/launched.safetensors" ] || { echo "consumer: bin/fovea did not run the installed CLI"; exit 1; }
echo "consumer: ok"
