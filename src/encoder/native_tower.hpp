// The native-resolution towers' forward pass over one call's patches, whatever laid them out: the
// processor's native images (encode_native) or a mixed layout of merge units from several pyramid
// levels (encode_native_mixed). Private to the encoder stage.
#pragma once

#include <cstdint>
#include <vector>

#include "fovea/encoder.hpp"
#include "fovea/exec.hpp"
#include "fovea/native.hpp"

namespace fovea::native_detail {

// Rows [begin, end) of the tower's order that attend to each other.
struct Segment {
  int64_t begin, end;
};

// One call's patches as the tower reads them. Patch i (the caller's order, each merge unit's
// merge² patches consecutive and row-major) has its K = C·T·P·P values at patch[i], its 2-D
// rotary position (row[i], col[i]) (any real numbers: the angles are position · frequency) and,
// for a tower with a learned position table (Qwen3-VL), the point (table_y[i], table_x[i]) in
// table cells (0..G−1 on each axis) where the table is sampled bilinearly. order[r] is the patch
// that row r of the residual stream holds; a merge unit's patches stay consecutive and in their
// order there. `full` and `windowed` are the row ranges that attend together in full-attention
// blocks and in windowed blocks (Qwen2.5-VL; a tower without windows reads `full` only).
struct TowerInput {
  std::vector<const float*> patch;
  std::vector<double> row, col;
  std::vector<double> table_y, table_x;
  std::vector<int64_t> order;
  std::vector<Segment> full, windowed;
  int64_t size() const { return int64_t(patch.size()); }
};

// The tower, the merger and the DeepStack mergers over `in`: embeddings [N, D], projected
// [M, E] and deepstack in the caller's order, precision, encode_ms and attention_ms filled; the
// grids, image_rows and mrope_positions are the caller's to fill. Checks only what it needs
// (N > 0, a multiple of merge², at most 2^20).
NativeEncoding run_tower(EncoderContext& ctx, const VitModel& model, const TowerInput& in, const EncodeParams& params,
                         Executor& exec);

}  // namespace fovea::native_detail
