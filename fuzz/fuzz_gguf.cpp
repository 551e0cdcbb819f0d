// The GGUF reader (mmproj files users download for llama.cpp-style models): header, key/value
// metadata (strings, arrays, every scalar type), tensor infos (names, dims, ggml types,
// offsets, alignment), then every value read as floats and every tensor decoded to float32.
// Any bytes either parse, with every tensor decodable or refused, or give a fovea::Error.
// (tests/fuzz/gguf_fuzz.cpp is a hand-built version of the same target.)
#include <cstddef>
#include <cstdint>
#include <span>

#include "fovea/gguf.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fovea::fuzz::expect_only_fovea_errors([&] {
    const fovea::GgufFile f = fovea::GgufFile::from_bytes(std::span(data, size), "fuzz.gguf");
    for (const auto& kv : f.kv())  // (clang 14 cannot capture structured bindings)
      fovea::fuzz::expect_only_fovea_errors([&] { (void)kv.second.as_floats(kv.first); });
    for (const fovea::GgufTensorInfo& t : f.tensors()) {
      if (t.size_bytes > (64u << 20)) continue;  // decoding is linear; keep iterations fast
      fovea::fuzz::expect_only_fovea_errors([&] { (void)f.load_f32(t); });
    }
  });
  return 0;
}
