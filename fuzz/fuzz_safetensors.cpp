// The safetensors reader (checkpoints users download): the 8-byte header length, the JSON
// header, dtypes, shapes, offsets, overlaps and gaps, then every tensor loaded as itself and as
// float32, as the encoder's loaders do. Checks what the reader promises once it accepted a file:
// each tensor's bytes lie inside the buffer and match its shape.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fovea/safetensors.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fovea::fuzz::expect_only_fovea_errors([&] {
    fovea::SafetensorsLimits limits;
    limits.max_header_bytes = 1 << 20;
    const fovea::SafetensorsFile f = fovea::SafetensorsFile::from_bytes({data, size}, "fuzz.safetensors", limits);
    for (const auto& e : f.entries()) {
      if (f.find(e.name) == nullptr) __builtin_trap();
      const std::span<const std::byte> raw = f.data(e);
      if (raw.size() != e.end - e.begin) __builtin_trap();
      if (uint64_t(e.numel()) * e.element_size != raw.size()) __builtin_trap();
      fovea::fuzz::expect_only_fovea_errors([&] { (void)f.load(e); });
      fovea::fuzz::expect_only_fovea_errors([&] { (void)f.load_f32(e); });
    }
  });
  return 0;
}
