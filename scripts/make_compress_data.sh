#!/usr/bin/env bash
# Embeddings of real photos for the compression report: scripts/make_compress_data.sh [OUT_DIR] [MODEL]
#   OUT_DIR/eval/*.safetensors   4 photos (astronaut, coffee, chelsea, motorcycle), foveated at B=576
#   OUT_DIR/train/*.safetensors  8 other photos, each at two budgets and fixations (~11k tokens)
# MODEL defaults to random:vit-b16 (random weights: no trained ViT is available here; trained
# features differ). Photos are skimage's bundled data (python3-skimage), public domain or CC0.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/fovea-compress}
model=${2:-random:vit-b16}
cli=${FOVEA_CLI:-build/fovea}
sk=$(/usr/bin/python3 -c 'import skimage, os; print(os.path.join(os.path.dirname(skimage.__file__), "data"))')
mkdir -p "$out/eval" "$out/train"
for img in astronaut.png coffee.png chelsea.png motorcycle_left.png; do
  "$cli" encode "$sk/$img" --model "$model" --precision bf16 --budget 576 -o "$out/eval/${img%.*}.safetensors" --json >/dev/null
done
for img in camera.png rocket.jpg hubble_deep_field.jpg coins.png retina.jpg horse.png motorcycle_right.png page.png; do
  "$cli" encode "$sk/$img" --model "$model" --precision bf16 --budget 1024 -o "$out/train/${img%.*}-1024.safetensors" --json >/dev/null
  "$cli" encode "$sk/$img" --model "$model" --precision bf16 --budget 400 --fixation 100,100 -o "$out/train/${img%.*}-400.safetensors" --json >/dev/null
done
echo "wrote $out/eval and $out/train"
