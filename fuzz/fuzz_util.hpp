// Shared by the fuzz targets: what counts as a finding. fovea's contract for bad input is a
// fovea::Error (the CLI's one line); anything else escaping a parser (std::bad_alloc from an
// unchecked size, std::out_of_range, a foreign exception) is a bug, so it aborts and libFuzzer
// saves the input. Crashes, ASan and UBSan reports (UB aborts: -fno-sanitize-recover) and
// leaks are findings by themselves.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <typeinfo>

#include "fovea/error.hpp"
#include "fovea/image.hpp"

namespace fovea::fuzz {

template <typename F>
void expect_only_fovea_errors(F&& f) {
  try {
    f();
  } catch (const fovea::Error&) {
    // The documented failure: one clear error.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: a non-fovea exception escaped (%s): %s\n", typeid(e).name(), e.what());
    std::abort();
  }
}

// The image targets' body: decode `data` as an image file, 8-bit for even sizes and float (as
// load_image_f32 does, 16-bit precision kept) for odd ones; only fovea::Error may escape.
inline void decode_image_either_way(const uint8_t* data, size_t size, const char* name) {
  fovea::LoadOptions options;
  options.max_pixels = 1u << 22;  // the CLI's default is 1e8; keep each run fast and under the RSS limit
  expect_only_fovea_errors([&] {
    if (size % 2) (void)fovea::decode_image_f32({data, size}, options, name);
    else (void)fovea::decode_image({data, size}, options, name);
  });
}

// A little-endian reader over the fuzzer's bytes that never runs out (zeros past the end).
struct Bytes {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  uint8_t u8() { return at < size ? data[at++] : 0; }
  uint16_t u16() { return uint16_t(u8() | (u8() << 8)); }
  uint32_t u32() { return uint32_t(u16()) | (uint32_t(u16()) << 16); }
  float f32() {  // any bit pattern: NaN, inf, denormals, huge values are all fair game
    uint32_t v = u32();
    float f;
    __builtin_memcpy(&f, &v, 4);
    return f;
  }
  size_t left() const { return at < size ? size - at : 0; }
  const uint8_t* rest() const { return data + (at < size ? at : size); }
};

}  // namespace fovea::fuzz
