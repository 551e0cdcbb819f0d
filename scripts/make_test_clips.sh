#!/usr/bin/env bash
# Test clips for `fovea video` and bench/video_bench.py, made from real photographs (Debian's
# python3-skimage data) with Debian's ffmpeg (libx264, yuv420p, crf 18, 25 fps).
#
#   scripts/make_test_clips.sh [OUT_DIR] [--seconds S] [--size WxH] [--sprite PHOTO] [--cut-to PHOTO]
#   scripts/make_test_clips.sh --fixtures                             # tests/data/video (small, committed)
#
# Benchmark clips (fixation for the bench: top right, (0.8·W, 0.2·H)):
#   static_away.mp4     a static photo (motorcycle) with a second photo (a cat, ~10% of the frame)
#                       moving along the bottom left, away from the fixation;
#   static_through.mp4  the same object moving diagonally through the fixation;
#   pan.mp4             a slow pan (2 px per frame) over a large photo (Hubble deep field);
#   cut.mp4             static_away's first half, then a cut to another photo (coffee);
#   pan_patch.mp4       the pan's photo moved by a whole patch (16 px) per frame, lossless (x264
#                       -qp 0, yuv444p): the case where a shifted patch is the previous frame's
#                       byte for byte, so its patch embedding is reused (docs/how-to/video.md).
# --sprite PHOTO, --cut-to PHOTO: other photos of python3-skimage's data for the moving object and
# the cut's second scene. The cat is also in the tests' fixtures; clips from photos no test uses:
#   scripts/make_test_clips.sh /tmp/fovea-clips-heldout --sprite coffee.png --cut-to retina.jpg
set -euo pipefail
cd "$(dirname "$0")/.."
command -v ffmpeg >/dev/null || { echo "make_test_clips: ffmpeg not found (apt-get install ffmpeg)" >&2; exit 1; }
PY=/usr/bin/python3
SK=$($PY -c 'import os, skimage; print(os.path.join(os.path.dirname(skimage.__file__), "data"))')
for f in motorcycle_left.png chelsea.png hubble_deep_field.jpg coffee.png astronaut.png; do
  [ -f "$SK/$f" ] || { echo "make_test_clips: $SK/$f missing (apt-get install python3-skimage)" >&2; exit 1; }
done
FF=(ffmpeg -hide_banner -loglevel error -y)
X264=(-c:v libx264 -preset medium -crf 18 -pix_fmt yuv420p -r 25)

if [ "${1:-}" = "--fixtures" ]; then
  out=tests/data/video
  mkdir -p "$out"
  # 160x96, 12 frames: the astronaut with the cat moving 4 px per frame; H.264 in MP4 and MJPEG in AVI.
  filt="[0]scale=160:160,crop=160:96:0:20[bg];[1]scale=40:28[o];[bg][o]overlay=x='8+n*4':y=60"
  "${FF[@]}" -loop 1 -i "$SK/astronaut.png" -loop 1 -i "$SK/chelsea.png" -filter_complex "$filt" -frames:v 12 \
    -c:v libx264 -preset medium -crf 20 -pix_fmt yuv420p -r 25 -g 6 -movflags +faststart "$out/small.mp4"
  "${FF[@]}" -loop 1 -i "$SK/astronaut.png" -loop 1 -i "$SK/chelsea.png" -filter_complex "$filt" -frames:v 12 \
    -c:v mjpeg -q:v 12 -pix_fmt yuvj420p -r 25 "$out/small.avi"
  # Inputs real videos bring (tests/test_video_inputs.cpp):
  # small_rot90.mp4: small.mp4's stream copied with a display matrix (a phone's rotate tag; ffmpeg
  # 5.1 writes one on stream copy): players and ffmpeg show it turned 90 degrees counter-clockwise.
  "${FF[@]}" -i "$out/small.mp4" -c copy -metadata:s:v:0 rotate=90 "$out/small_rot90.mp4"
  # dup_pts.mkv: 6 frames of 48x32 whose timestamps come in equal pairs (0 0 1 1 2 2, in 1/25 s).
  "${FF[@]}" -loop 1 -i "$SK/astronaut.png" -vf "scale=64:40,setsar=1,crop=48:32:'2*n':'n',setpts='floor(N/2)/25/TB'" \
    -frames:v 6 -c:v libx264 -preset medium -crf 30 -pix_fmt yuv420p -bf 0 -fps_mode passthrough -enc_time_base 1/25 \
    "$out/dup_pts.mkv"
  # restart.ts: two MPEG-TS segments joined byte for byte (cat a.ts b.ts): 4 frames of 48x32, then
  # 4 frames of 32x48 whose timestamps start over (a size change and a backward jump).
  "${FF[@]}" -loop 1 -i "$SK/astronaut.png" -vf "scale=64:40,setsar=1,crop=48:32:'2*n':'n'" -frames:v 4 \
    -c:v libx264 -preset medium -crf 30 -pix_fmt yuv420p -bf 0 -r 25 -f mpegts "$out/restart_a.ts.tmp"
  "${FF[@]}" -loop 1 -i "$SK/chelsea.png" -vf "scale=40:64,setsar=1,crop=32:48:'n':'2*n'" -frames:v 4 \
    -c:v libx264 -preset medium -crf 30 -pix_fmt yuv420p -bf 0 -r 25 -f mpegts "$out/restart_b.ts.tmp"
  cat "$out/restart_a.ts.tmp" "$out/restart_b.ts.tmp" > "$out/restart.ts"
  rm -f "$out/restart_a.ts.tmp" "$out/restart_b.ts.tmp"
  ls -l "$out"
  exit 0
fi

out=${1:-/tmp/fovea-clips}
shift || true
seconds=2
size=960x540
sprite=chelsea.png
cut_to=coffee.png
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --sprite) sprite=$2; shift 2 ;;
    --cut-to) cut_to=$2; shift 2 ;;
    *) echo "make_test_clips: unknown option $1" >&2; exit 2 ;;
  esac
done
for f in "$sprite" "$cut_to"; do
  [ -f "$SK/$f" ] || { echo "make_test_clips: $SK/$f missing" >&2; exit 1; }
done
W=${size%x*}
H=${size#*x}
mkdir -p "$out"
# The object covers ~10% of the frame: ow x oh with ow*oh = 0.1*W*H, 3:2 (the cat's aspect).
ow=$(( ( $($PY -c "import math; print(int(math.sqrt(0.1*$W*$H*1.5)))") / 2 ) * 2 ))
oh=$(( ( ow * 2 / 3 ) / 2 * 2 ))
bg="[0]scale=${W}:-2,crop=${W}:${H},setsar=1[bg];[1]scale=${ow}:${oh}[o]"
# Away: bottom-left band, left to right over the clip, never reaching the top-right fixation.
"${FF[@]}" -loop 1 -i "$SK/motorcycle_left.png" -loop 1 -i "$SK/$sprite" \
  -filter_complex "$bg;[bg][o]overlay=x='${W}*0.02+t/${seconds}*${W}*0.35':y='${H}-${oh}-${H}*0.03'" \
  -t "$seconds" "${X264[@]}" "$out/static_away.mp4"
# Through: from bottom left to top right, crossing (0.8 W, 0.2 H) at about 80% of the clip.
"${FF[@]}" -loop 1 -i "$SK/motorcycle_left.png" -loop 1 -i "$SK/$sprite" \
  -filter_complex "$bg;[bg][o]overlay=x='(t/${seconds})*(${W}-${ow})':y='(1-t/${seconds})*(${H}-${oh})'" \
  -t "$seconds" "${X264[@]}" "$out/static_through.mp4"
# Pan: 2 px per frame to the right over the Hubble deep field, upscaled so the window fits.
"${FF[@]}" -loop 1 -i "$SK/hubble_deep_field.jpg" \
  -vf "scale=$(( W * 3 / 2 )):-2,crop=${W}:${H}:x='n*2':y=40" -t "$seconds" "${X264[@]}" "$out/pan.mp4"
# Pan by whole patches: 16 px per frame to the right (at most W*3/2 - W px: static after that), lossless.
"${FF[@]}" -loop 1 -i "$SK/hubble_deep_field.jpg" \
  -vf "scale=$(( W * 3 / 2 )):-2,crop=${W}:${H}:x='min(n*16\,iw-${W})':y=40" -t "$seconds" \
  -c:v libx264 -preset medium -qp 0 -pix_fmt yuv444p -r 25 "$out/pan_patch.mp4"
# Cut: half of static_away, then the coffee photo, static.
half=$($PY -c "print($seconds/2)")
"${FF[@]}" -i "$out/static_away.mp4" -loop 1 -i "$SK/$cut_to" \
  -filter_complex "[0]trim=duration=${half},setpts=PTS-STARTPTS,setsar=1[a];[1]scale=${W}:${H},setsar=1,trim=duration=${half},setpts=PTS-STARTPTS,fps=25,format=yuv420p[b];[a][b]concat=n=2:v=1:a=0" \
  "${X264[@]}" "$out/cut.mp4"
ls -l "$out"
