#!/usr/bin/env bash
# Installs what fovea needs from Debian's packages, idempotently.
#   scripts/install-deps.sh build   compiler, CMake, libraries (the default)
#   scripts/install-deps.sh test    build + what the test suite reads (numpy, tesseract, images, Vulkan,
#                                   the service's FastAPI and Uvicorn, headless Chromium)
#   scripts/install-deps.sh bench   test + the competitors measured by the benchmarks (torch, OpenCV)
#   scripts/install-deps.sh fuzz    build + clang 14, libFuzzer and its runtimes (scripts/fuzz.sh)
# Packages already present are not reinstalled and apt's index is refreshed only when
# something is missing, so a second run costs a few dpkg queries.
set -euo pipefail

group=${1:-build}

build_pkgs=(build-essential cmake pkg-config ninja-build
  libpng-dev libjpeg-dev libhwy-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev libopenblas-dev
  libvulkan-dev glslc
  libb2-dev
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev
  libfaiss-dev
  python3-dev pybind11-dev python3-numpy
  ccache)
test_pkgs=(python3 python3-numpy tesseract-ocr tesseract-ocr-eng python3-skimage opencv-data
  fonts-dejavu-core mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  fonts-dejavu-extra fonts-lyx python3-pil python3-opencv
  python3-pytest python3-distributed ffmpeg python3-av
  clang libfuzzer-14-dev libclang-rt-14-dev
  python3-fastapi python3-uvicorn python3-multipart python3-prometheus-client python3-httpx
  chromium chromium-driver python3-selenium wrk
  python3-matplotlib)
# The fuzz targets (scripts/fuzz.sh): clang 14 with libFuzzer, its sanitizer runtimes and its
# OpenMP (the encoder is part of the library every target links).
fuzz_pkgs=(clang-14 libfuzzer-14-dev libclang-rt-14-dev libomp-14-dev)
bench_pkgs=(python3-torch python3-torchvision python3-opencv libopenblas0-pthread python3-matplotlib)

# Packages that must come from bookworm-backports: Debian 12's own Mesa (22.3) has no sparse
# binding, Mesa 25 does.
backports_pkgs=(mesa-vulkan-drivers)

case "$group" in
  build) want=("${build_pkgs[@]}") ;;
  test) want=("${build_pkgs[@]}" "${test_pkgs[@]}" "${fuzz_pkgs[@]}") ;;
  fuzz) want=("${build_pkgs[@]}" "${fuzz_pkgs[@]}") ;;
  bench|all) want=("${build_pkgs[@]}" "${test_pkgs[@]}" "${fuzz_pkgs[@]}" "${bench_pkgs[@]}") ;;
  *) echo "install-deps: unknown group '$group' (expected build, test, fuzz or bench)" >&2; exit 2 ;;
esac

SUDO=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "install-deps: not root and no sudo; install these by hand: ${want[*]}" >&2; exit 1; fi
fi
export DEBIAN_FRONTEND=noninteractive

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# The Debian mirror this system already uses: first URI of a stanza/line serving 'bookworm'.
debian_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk 'BEGIN{RS=""; FS="\n"}
      /Suites:[^\n]*bookworm([ \n]|$)/ && !/bookworm-security/ {
        for (i = 1; i <= NF; i++) if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, a, " "); print a[1]; exit } }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1 == "deb" && $0 ~ / bookworm( |$)/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
}

backports_file=/etc/apt/sources.list.d/fovea-bookworm-backports.sources
need_update=0
needs_backports=0
for p in "${want[@]}"; do
  for b in "${backports_pkgs[@]}"; do [ "$p" = "$b" ] && needs_backports=1; done
done

if [ "$needs_backports" = 1 ] && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  mirror=$(debian_mirror || true)
  if [ -z "$mirror" ]; then
    echo "install-deps: no Debian 'bookworm' source entry found to take the backports mirror from" >&2
    exit 1
  fi
  printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" | "${SUDO[@]}" tee "$backports_file" >/dev/null
  echo "install-deps: added bookworm-backports from $mirror"
  need_update=1
fi

missing=()
for p in "${want[@]}"; do installed "$p" || missing+=("$p"); done

# Mesa from backports: installed but older than 25 counts as missing.
mesa_from_backports=0
if [ "$needs_backports" = 1 ]; then
  v=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)
  if [ -z "$v" ] || dpkg --compare-versions "$v" lt 25; then mesa_from_backports=1; need_update=1; fi
fi

if [ "${#missing[@]}" -gt 0 ] || [ "$mesa_from_backports" = 1 ]; then
  need_update=1
fi
[ "$need_update" = 1 ] || { echo "install-deps: '$group' packages already installed"; exit 0; }

"${SUDO[@]}" apt-get update -q
regular=()
for p in "${missing[@]}"; do [ "$p" = mesa-vulkan-drivers ] || regular+=("$p"); done
if [ "${#regular[@]}" -gt 0 ]; then
  echo "install-deps: installing ${regular[*]}"
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${regular[@]}"
fi
if [ "$mesa_from_backports" = 1 ]; then
  echo "install-deps: installing mesa-vulkan-drivers from bookworm-backports"
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends -t bookworm-backports mesa-vulkan-drivers
fi
