// The PyTorch checkpoint reader (checkpoints users download as .pt / .pth / pytorch_model.bin):
// the ZIP directory (ZIP64 included), the pickle interpreter (which must never call anything and
// never loop), the search for the state dict, and every tensor's storage, offset, shape and
// strides; then every tensor loaded as itself and as float32, as the encoder's loaders do.
// Checks what the reader promises once it accepted a file: names are unique and found, and a
// contiguous tensor's bytes are exactly its shape's.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fovea/torch_checkpoint.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fovea::fuzz::expect_only_fovea_errors([&] {
    fovea::TorchCheckpointLimits limits;
    limits.max_pickle_bytes = 1 << 20;
    const fovea::TorchCheckpoint f = fovea::TorchCheckpoint::from_bytes({data, size}, "fuzz.pt", limits);
    for (const auto& e : f.entries()) {
      if (f.find(e.name) != &e) __builtin_trap();
      if (e.shape.size() != e.stride.size()) __builtin_trap();
      const std::span<const std::byte> raw = f.data(e);
      if (e.contiguous && raw.size() != uint64_t(e.numel()) * e.element_size) __builtin_trap();
      if (!e.contiguous && !raw.empty()) __builtin_trap();
      fovea::fuzz::expect_only_fovea_errors([&] { (void)f.load(e); });
      fovea::fuzz::expect_only_fovea_errors([&] { (void)f.load_f32(e); });
    }
  });
  return 0;
}
