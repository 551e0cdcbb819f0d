// Private to fovea: the parts of a TokenBatch that do not depend on how the patches are
// sampled, shared by the CPU extraction (extract.cpp) and the Vulkan sampler
// (vulkan/backend.cpp), so that both fill positions, levels, boxes and the normalisation
// constants with the same float operations; and the CPU's patch sampler, which the windows
// foveation (windows/) cuts its windows with.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "fovea/allocate.hpp"
#include "fovea/extract.hpp"

namespace fovea {

// Error(invalid_argument) for a dtype other than f32, f16 or u8, or a normalisation whose
// mean or std is not finite or whose std is not > 0.
void check_extract_params(const ExtractParams& params);

// A batch of n tokens of P×P: patches [n, 3, P, P] in params.dtype allocated (not filled),
// positions [n, 4], levels [n] and boxes sized; patch_px and params set.
TokenBatch make_batch(int64_t n, int P, const ExtractParams& params);

// The batch of `allocation`'s tokens, in its layout's order: patches allocated for the caller
// to sample, positions, levels, boxes and level_offsets filled.
TokenBatch allocation_batch(const Allocation& allocation, const ExtractParams& params);

// Float outputs are v · scale[c] + bias[c] for a uint8 sample v of channel c (binary32, no
// FMA): (v / 255 − mean) / std when normalising, v / 255 otherwise.
struct PatchScale {
  std::array<float, 3> scale, bias;
};
PatchScale patch_scale(const ExtractParams& params);

// Writes one channel row of P samples in the batch's dtype.
struct RowWriter {
  DType dtype;
  std::array<float, 3> scale, bias;  // float outputs: v * scale + bias

  RowWriter(const ExtractParams& p) : dtype(p.dtype) {
    const PatchScale ps = patch_scale(p);
    scale = ps.scale;
    bias = ps.bias;
  }

  void write(const uint8_t* src, int n, int c, std::byte* dst) const {
    switch (dtype) {
      case DType::u8:
        std::copy_n(src, n, reinterpret_cast<uint8_t*>(dst));
        break;
      case DType::f32: {
        float* d = reinterpret_cast<float*>(dst);
        for (int i = 0; i < n; ++i) d[i] = src[i] * scale[c] + bias[c];
        break;
      }
      case DType::f16: {
        uint16_t* d = reinterpret_cast<uint16_t*>(dst);
        for (int i = 0; i < n; ++i) d[i] = f32_to_f16(src[i] * scale[c] + bias[c]);
        break;
      }
      default:
        break;
    }
  }
};

// Copies the P×P block at (x0, y0) of `img` (clamped to its edges) for every output channel into
// dst (one patch, [3, P, P] of elem-byte values). `img` is a pyramid level (planar) or the
// caller's level-0 view (any pixel stride).
void sample_block(const ImageViewU8& img, int x0, int y0, int P, const RowWriter& w, std::byte* dst, size_t elem);

}  // namespace fovea
