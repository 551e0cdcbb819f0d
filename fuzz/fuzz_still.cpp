// Still images through FFmpeg's decoders (src/image/libav.cpp): WebP, GIF, BMP, TIFF, PNM,
// QOI, JPEG 2000 (and JPEG XL's refusal). What is fuzzed is fovea's side: signature detection, the header
// extents read before decoding, EXIF/TIFF orientation, the pixel-format conversion and the
// scatter; FFmpeg's own code is not instrumented (Debian's shared libraries), so its coverage
// gives no feedback. Odd-sized inputs decode to float, as load_image_f32 does.
#include <cstddef>
#include <cstdint>

#include "fovea/image.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (fovea::quiet_ffmpeg_log(), true);
  (void)quiet;
  fovea::fuzz::decode_image_either_way(data, size, "fuzz.still");
  return 0;
}
