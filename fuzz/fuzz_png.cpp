// PNG decode (libpng behind fovea's decoder): headers, chunks, every colour type and bit depth,
// interlacing, palettes, truncation. Odd-sized inputs also decode to float, as load_image_f32
// does (16-bit precision kept).
#include <cstddef>
#include <cstdint>
#include <span>

#include "fovea/image.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fovea::LoadOptions options;
  options.max_pixels = 1u << 22;  // the CLI's default is 1e8; keep each run fast and under the RSS limit
  fovea::fuzz::expect_only_fovea_errors([&] {
    if (size % 2) (void)fovea::decode_image_f32({data, size}, options, "fuzz.png");
    else (void)fovea::decode_image({data, size}, options, "fuzz.png");
  });
  return 0;
}
