// libFuzzer target for the GGUF reader: any bytes either parse, with every tensor decodable or
// refused as unsupported, or throw fovea::Error. Built by hand (not part of the CMake build):
//
//   clang++-14 -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Ibuild/generated \
//     tests/fuzz/gguf_fuzz.cpp src/io/gguf.cpp src/core/tensor.cpp src/core/error.cpp -o /tmp/gguf_fuzz
//   /tmp/gguf_fuzz -max_total_time=60 tests/data/encoder/gguf_llava/mmproj.gguf tests/data/encoder/gguf_siglip/mmproj.gguf
#include <cstdint>
#include <span>

#include "fovea/error.hpp"
#include "fovea/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fovea::GgufFile f = fovea::GgufFile::from_bytes(std::span(data, size), "fuzz.gguf");
    for (const auto& [key, v] : f.kv()) {
      try {
        (void)v.as_floats(key);
      } catch (const fovea::Error&) {
      }
    }
    for (const fovea::GgufTensorInfo& t : f.tensors()) {
      if (t.size_bytes > (64u << 20)) continue;  // decoding is linear; keep iterations fast
      try {
        (void)f.load_f32(t);
      } catch (const fovea::Error&) {
      }
    }
  } catch (const fovea::Error&) {
  }
  return 0;
}
