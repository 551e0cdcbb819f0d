// Private to fovea: the parts of a TokenBatch that do not depend on how the patches are
// sampled, shared by the CPU extraction (extract.cpp) and the Vulkan sampler
// (vulkan/backend.cpp), so that both fill positions, levels, boxes and the normalisation
// constants with the same float operations.
#pragma once

#include <array>
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

}  // namespace fovea
