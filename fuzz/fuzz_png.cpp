// PNG decode (libpng behind fovea's decoder): headers, chunks, every colour type and bit depth,
// interlacing, palettes, truncation. Odd-sized inputs also decode to float, as load_image_f32
// does (16-bit precision kept).
#include <cstddef>
#include <cstdint>

#include "fovea/image.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fovea::fuzz::decode_image_either_way(data, size, "fuzz.png");
  return 0;
}
