// The mixed foveation of a native-resolution tower (fovea/native.hpp, for experiment): the
// quadtree's leaves are merge units of one mip level each; their patches are placed at their
// centres in patch units of the layout's finest level and run as one sequence.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "encoder/encoder_internal.hpp"
#include "encoder/native_tower.hpp"
#include "fovea/error.hpp"
#include "fovea/native.hpp"

namespace fovea {

using namespace encoder_detail;
using namespace native_detail;

namespace {

const NativeConfig& qwen_config(const VitModel& model, const char* what) {
  const VitConfig& c = model.config();
  if (!c.native.enabled())
    throw invalid_argument(std::string(what) + ": '" + model.source() +
                           "' is not a Qwen-VL tower (the mixed foveation needs Qwen2-VL, Qwen2.5-VL or Qwen3-VL)");
  return c.native;
}

// v rounded half up.
int32_t round_half_up(double v) { return int32_t(std::floor(v + 0.5)); }

// A unit's centre on one axis in merged-token units of mip ℓ₀ (node index n at level ℓ).
double unit_centre(int n, int level, int l0) { return (n + 0.5) * std::ldexp(1.0, level - l0); }

}  // namespace

int native_mixed_tile_px(const VitModel& model) {
  const NativeConfig& nc = qwen_config(model, "native_mixed_tile_px");
  return nc.factor(model.config().patch_px);
}

NativeMixedInput native_mixed_input(const VitModel& model, const TokenBatch& batch, int image_width, int image_height) {
  const char* what = "native_mixed_input";
  const NativeConfig& nc = qwen_config(model, what);
  const VitConfig& c = model.config();
  const int P = c.patch_px, mg = nc.merge, T = nc.temporal_patch, tile = nc.factor(P);
  if (batch.windowed())
    throw invalid_argument(std::string(what) + ": a windows token batch; the mixed foveation reads a mixed one");
  if (batch.patch_px != tile)
    throw invalid_argument(std::string(what) + ": the tokens are " + std::to_string(batch.patch_px) +
                           "-px patches; this tower's merge units are " + std::to_string(tile) + " px (patch " +
                           std::to_string(P) + " x merge " + std::to_string(mg) + "): tokenize with patch_px " +
                           std::to_string(tile));
  const int64_t M = batch.size();
  if (M < 1) throw invalid_argument(std::string(what) + ": no token");
  if (batch.patches.dtype() != DType::f32 || batch.patches.rank() != 4 || batch.patches.dim(1) != 3 ||
      batch.patches.dim(2) != tile || batch.patches.dim(3) != tile)
    throw invalid_argument(std::string(what) + ": the patches must be float32 [N, 3, " + std::to_string(tile) + ", " +
                           std::to_string(tile) + "]");
  if (int64_t(batch.boxes.size()) != M || batch.levels.numel() != M || batch.levels.dtype() != DType::i32)
    throw invalid_argument(std::string(what) + ": the batch's boxes and levels do not match its patches");
  const Normalization want = normalization(c.input), got = batch.params.norm;
  for (int ch = 0; ch < 3; ++ch)
    if (!got.enabled || std::fabs(got.mean[ch] - want.mean[ch]) > 1e-6f || std::fabs(got.std[ch] - want.std[ch]) > 1e-6f)
      throw invalid_argument(std::string(what) + ": the patches are not normalised with the model's mean and std");
  const TileGrid grid = TileGrid::make(image_width, image_height, tile);

  NativeMixedInput in;
  in.image_width = image_width, in.image_height = image_height;
  in.units.resize(size_t(M));
  in.boxes = batch.boxes;
  const int32_t* lv = batch.levels.data<int32_t>();
  int l0 = 64;
  for (int64_t u = 0; u < M; ++u) {
    const int level = lv[u];
    if (level < 0 || level > 24) throw invalid_argument(std::string(what) + ": a token's level is out of range");
    const double side = double(tile) * std::ldexp(1.0, level);
    const std::array<float, 4>& b = batch.boxes[size_t(u)];
    const Token t{int32_t(std::lround(b[0] / side)), int32_t(std::lround(b[1] / side)), level};
    if (t.x < 0 || t.y < 0 || t.x >= grid.tiles_x_at(level) || t.y >= grid.tiles_y_at(level) ||
        std::fabs(b[2] - b[0] - side) > 0.5 || std::fabs(b[0] - t.x * side) > 0.5 || std::fabs(b[1] - t.y * side) > 0.5)
      throw invalid_argument(std::string(what) + ": a token is not a quadtree node of the " + std::to_string(image_width) +
                             "x" + std::to_string(image_height) + " image's " + std::to_string(tile) + "-px tiles");
    in.units[size_t(u)] = t;
    l0 = std::min(l0, level);
  }
  in.unit_level = l0;
  in.grid_h = grid.tiles_y_at(l0) * mg, in.grid_w = grid.tiles_x_at(l0) * mg;

  const int64_t N = M * mg * mg, K = int64_t(3) * T * P * P;
  if (N > (int64_t(1) << 20)) throw Error(Errc::limit_exceeded, std::string(what) + ": more than 2^20 patches");
  in.patches = Tensor(DType::f32, {N, K});
  in.positions = Tensor(DType::f32, {N, 2});
  float* out = in.patches.data<float>();
  float* pos = in.positions.data<float>();
  const float* src = batch.patches.data<float>();
  for (int64_t u = 0; u < M; ++u) {
    const Token& t = in.units[size_t(u)];
    const double scale = std::ldexp(1.0, t.level - l0);
    const float* unit = src + u * 3 * tile * tile;
    for (int my = 0; my < mg; ++my)
      for (int mx = 0; mx < mg; ++mx) {
        // (C, T, P, P): the patch's pixels, the still image's frame repeated T times.
        for (int ch = 0; ch < 3; ++ch)
          for (int k = 0; k < T; ++k)
            for (int y = 0; y < P; ++y) {
              std::memcpy(out, unit + (int64_t(ch) * tile + my * P + y) * tile + mx * P, size_t(P) * 4);
              out += P;
            }
        *pos++ = float((t.y * mg + my + 0.5) * scale - 0.5);
        *pos++ = float((t.x * mg + mx + 0.5) * scale - 0.5);
      }
  }
  return in;
}

Tensor native_mixed_mrope_positions(const VitModel& model, const NativeMixedInput& input) {
  qwen_config(model, "native_mixed_mrope_positions");
  const int64_t M = input.merged();
  Tensor ids(DType::i32, {M, 3});
  int32_t* p = ids.data<int32_t>();
  for (const Token& t : input.units) {
    *p++ = 0;
    *p++ = round_half_up(unit_centre(t.y, t.level, input.unit_level) - 0.5);
    *p++ = round_half_up(unit_centre(t.x, t.level, input.unit_level) - 0.5);
  }
  return ids;
}

NativeEncoding encode_native_mixed(EncoderContext& ctx, const VitModel& model, const NativeMixedInput& input,
                                   const EncodeParams& params, Executor& exec) {
  const char* what = "encode_native_mixed";
  const NativeConfig& nc = qwen_config(model, what);
  const VitConfig& c = model.config();
  const int P = c.patch_px, mg = nc.merge, unit = mg * mg, G = c.grid;
  const int64_t M = input.merged(), N = M * unit, K = int64_t(c.channels) * nc.temporal_patch * P * P;
  if (M < 1 || input.patches.dtype() != DType::f32 || input.patches.rank() != 2 || input.patches.dim(0) != N ||
      input.patches.dim(1) != K || input.positions.dtype() != DType::f32 || input.positions.rank() != 2 ||
      input.positions.dim(0) != N || input.positions.dim(1) != 2 || int64_t(input.boxes.size()) != M ||
      input.grid_h < 1 || input.grid_w < 1)
    throw invalid_argument(std::string(what) + ": the input must hold M >= 1 units, patches [M·" + std::to_string(unit) +
                           ", " + std::to_string(K) + "] and positions [M·" + std::to_string(unit) +
                           ", 2] float32 (native_mixed_input)");
  for (const Token& t : input.units)
    if (t.level < input.unit_level || t.level > 24)
      throw invalid_argument(std::string(what) + ": a unit's level is below the input's unit level");

  TowerInput tw;
  tw.patch.resize(size_t(N)), tw.row.resize(size_t(N)), tw.col.resize(size_t(N));
  tw.table_y.resize(size_t(N)), tw.table_x.resize(size_t(N));
  const float* pos = input.positions.data<float>();
  auto table = [G](double v, int n) { return n > 1 ? v * double(G - 1) / double(n - 1) : 0.0; };
  for (int64_t i = 0; i < N; ++i) {
    tw.patch[size_t(i)] = input.patches.data<float>() + i * K;
    tw.row[size_t(i)] = pos[2 * i], tw.col[size_t(i)] = pos[2 * i + 1];
    if (!std::isfinite(pos[2 * i]) || !std::isfinite(pos[2 * i + 1]))
      throw invalid_argument(std::string(what) + ": a position is not finite");
    tw.table_y[size_t(i)] = table(pos[2 * i], input.grid_h), tw.table_x[size_t(i)] = table(pos[2 * i + 1], input.grid_w);
  }
  tw.full.push_back({0, N});
  if (nc.window_px > 0) {
    // Qwen2.5-VL: each unit joins the window of mip ℓ₀ that holds its centre; windows row-major,
    // units in the layout's order within each.
    const int vws = std::max(1, nc.window_px / mg / P);  // merge units of mip ℓ₀ per window side
    const int wcols = (input.grid_w / mg + vws - 1) / vws;
    std::vector<int64_t> win(static_cast<size_t>(M));
    for (int64_t u = 0; u < M; ++u) {
      const Token& t = input.units[size_t(u)];
      const int64_t wy = int64_t(std::floor(unit_centre(t.y, t.level, input.unit_level) / vws));
      const int64_t wx = int64_t(std::floor(unit_centre(t.x, t.level, input.unit_level) / vws));
      win[size_t(u)] = wy * wcols + std::min<int64_t>(wx, wcols - 1);
    }
    std::vector<int64_t> units(static_cast<size_t>(M));
    std::iota(units.begin(), units.end(), int64_t(0));
    std::stable_sort(units.begin(), units.end(), [&](int64_t a, int64_t b) { return win[size_t(a)] < win[size_t(b)]; });
    tw.order.reserve(size_t(N));
    for (size_t k = 0; k < units.size(); ++k) {
      if (k == 0 || win[size_t(units[k])] != win[size_t(units[k - 1])])
        tw.windowed.push_back({int64_t(tw.order.size()), int64_t(tw.order.size())});
      for (int j = 0; j < unit; ++j) tw.order.push_back(units[k] * unit + j);
      tw.windowed.back().end = int64_t(tw.order.size());
    }
  } else {
    tw.order.resize(size_t(N));
    std::iota(tw.order.begin(), tw.order.end(), int64_t(0));
  }
  NativeEncoding out = run_tower(ctx, model, tw, params, exec);
  out.grid_thw = Tensor(DType::i32, {0, 3});
  out.image_rows = {0, M};
  out.mrope_positions = native_mixed_mrope_positions(model, input);
  return out;
}

NativeEncoding encode_native_mixed(const VitModel& model, const NativeMixedInput& input, const EncodeParams& params,
                                   Executor& exec) {
  ContextPool::Lease lease = model.impl().contexts.take();
  return encode_native_mixed(lease.context(), model, input, params, exec);
}

}  // namespace fovea
