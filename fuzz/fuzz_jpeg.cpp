// JPEG decode with EXIF (libjpeg-turbo behind fovea's decoder, fovea's own APP1/TIFF parser):
// markers, Huffman data, progressive scans, CMYK/YCCK, and the Orientation tag, which decides
// where every decoded row is scattered. Inputs that start with "Exif" go to the EXIF parser
// alone (an APP1 payload), so the TIFF walk is fuzzed without the JPEG around it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "fovea/image.hpp"
#include "fuzz_util.hpp"
#include "image/codecs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && std::memcmp(data, "Exif", 4) == 0) {
    const int o = fovea::image_detail::exif_orientation({data, size});
    if (o < 0 || o > 8) __builtin_trap();  // the contract: 0 (none/malformed) or 1..8
    return 0;
  }
  fovea::LoadOptions options;
  options.max_pixels = 1u << 22;
  options.apply_exif_orientation = size % 3 != 0;
  fovea::fuzz::expect_only_fovea_errors([&] {
    if (size % 2) (void)fovea::decode_image_f32({data, size}, options, "fuzz.jpg");
    else (void)fovea::decode_image({data, size}, options, "fuzz.jpg");
  });
  return 0;
}
