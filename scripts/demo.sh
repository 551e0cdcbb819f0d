#!/usr/bin/env bash
# The main job on the built-in sample: installs what the build needs, builds the fovea CLI (not
# the tests or benchmarks), then tokenizes data/astronaut.jpg with a fixation on the face.
# Outputs land in out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh build
bash scripts/build.sh build-demo -DFOVEA_BUILD_TESTS=OFF -DFOVEA_BUILD_BENCH=OFF -- --target fovea_cli
mkdir -p out
./build-demo/fovea tokenize data/astronaut.jpg --budget 273 --fixation 250,120 \
  -o out/astronaut.safetensors --overlay out/astronaut-overlay.png --seen out/astronaut-seen.png
