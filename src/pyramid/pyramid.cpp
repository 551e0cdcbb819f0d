// Mip pyramids: the level arithmetic, the reduction schedule and the threading. The row
// kernels (and the exact arithmetic) live in downsample.hpp.
//
// Schedule. The chain is memory-bound: level 0 is read once from DRAM, and what costs extra
// is reading each finished level back for the next one. Level-ℓ row j depends only on
// level-0 rows [j·2^ℓ, (j+1)·2^ℓ) (floor semantics make the levels nest), so a strip of
// S = 2^k level-0 rows starting at a multiple of S determines its own rows of levels 1..k. build_pyramid therefore runs strips × channels in parallel and, inside a
// strip, builds level 1, then level 2 from the level-1 rows it has just written (still in
// L2), and so on down to level k. The levels below k are small and run one after another.
// Every output row is computed by the same row kernel from the same input rows whatever the
// schedule, so the result does not depend on the strip size, the thread count or the order.
#include "fovea/pyramid.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "fovea/error.hpp"
#include "pyramid/downsample.hpp"

namespace fovea {

namespace {

using pyramid_detail::RowKernels;
using pyramid_detail::row_kernels;

// At most 2^6 = 64 level-0 rows per strip: levels 1..6 fused.
constexpr int kMaxFusedLevels = 6;
// The level-1 rows of one strip are re-read for level 2: keep them well inside L2.
constexpr size_t kStripCacheBytes = size_t(256) << 10;
// A task (parallel_for chunk) should read at least this much, or waking threads costs more
// than it saves.
constexpr size_t kMinTaskBytes = size_t(256) << 10;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string extents(int w, int h, int c) {
  return std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(c);
}

// Rows [y0, y1) of channel c of dst = one reduction step of src.
// `src` has contiguous rows (an owned level, or a planar view of level 0).
template <typename T>
void reduce_rows(const ImageView<T>& src, Image<T>& dst, int c, int y0, int y1,
                 const RowKernels<T>& k) {
  const int dst_w = dst.width();
  if (src.height() == 1) {  // a 2×1 box along the row; dst is a single row
    if (src.width() == 1)
      dst.row(c, 0)[0] = src.row(c, 0)[0];  // 1×1 stays 1×1
    else
      k.box2x1(src.row(c, 0), dst.row(c, 0), dst_w);
    return;
  }
  for (int y = y0; y < y1; ++y) {
    const T* top = src.row(c, 2 * y);
    const T* bottom = src.row(c, 2 * y + 1);
    if (src.width() == 1)
      k.box1x2(top, bottom, dst.row(c, y), 1);  // a 1×2 box down the column
    else
      k.box2x2(top, bottom, dst.row(c, y), dst_w);
  }
}

// One whole level, rows of every channel in parallel.
template <typename T>
void reduce_level(const ImageView<T>& src, Image<T>& dst, const RowKernels<T>& k, Executor& exec) {
  const int64_t rows = dst.height();
  const size_t row_read_bytes = 2 * size_t(src.width()) * sizeof(T);
  const int64_t grain = std::max<int64_t>(1, ceil_div(kMinTaskBytes, row_read_bytes));
  exec.parallel_for(int64_t(dst.channels()) * rows, grain, [&](int64_t begin, int64_t end) {
    while (begin < end) {
      const int c = static_cast<int>(begin / rows);
      const int64_t y0 = begin % rows;
      const int64_t y1 = std::min(rows, y0 + (end - begin));
      reduce_rows(src, dst, c, static_cast<int>(y0), static_cast<int>(y1), k);
      begin += y1 - y0;
    }
  });
}

// Rows [y0, y1) of every channel of level 1 from an interleaved level 0 (pixel_stride != 1).
void reduce_rows_interleaved(const ImageViewU8& src, ImageU8& dst, int y0, int y1, bool reference) {
  const int C = src.channels(), dst_w = dst.width();
  const ptrdiff_t ps = src.pixel_stride();
  uint8_t* out[3] = {};
  for (int y = y0; y < y1; ++y) {
    for (int c = 0; c < C; ++c) out[c] = dst.row(c, y);
    if (src.height() == 1 || src.width() == 1) {  // 2×1 / 1×2 / 1×1 boxes: tiny images only
      const int sy1 = src.height() == 1 ? 0 : 2 * y + 1, sy0 = src.height() == 1 ? 0 : 2 * y;
      for (int c = 0; c < C; ++c)
        for (int x = 0; x < dst_w; ++x) {
          const int sx0 = src.width() == 1 ? 0 : 2 * x, sx1 = src.width() == 1 ? 0 : 2 * x + 1;
          if (sx0 == sx1 && sy0 == sy1)
            out[c][x] = src.at(c, sy0, sx0);
          else if (sx0 == sx1)
            out[c][x] = static_cast<uint8_t>((unsigned(src.at(c, sy0, sx0)) + src.at(c, sy1, sx0) + 1) >> 1);
          else
            out[c][x] = static_cast<uint8_t>((unsigned(src.at(c, sy0, sx0)) + src.at(c, sy0, sx1) + 1) >> 1);
        }
      continue;
    }
    const uint8_t* top = src.row(0, 2 * y);
    const uint8_t* bottom = src.row(0, 2 * y + 1);
    if (reference) pyramid_detail::box2x2_interleaved_ref(top, bottom, ps, C, out, dst_w);
    else pyramid_detail::box2x2_interleaved_simd(top, bottom, ps, C, out, dst_w);
  }
}

// The level count build_pyramid makes for a W×H level 0.
int level_count(const char* who, int W, int H, const PyramidParams& params) {
  if (params.max_levels < 0)
    throw Error(Errc::invalid_argument,
                std::string(who) + ": max_levels must be >= 0, got " + std::to_string(params.max_levels));
  const int full = full_mip_levels(W, H);
  return params.max_levels > 0 ? std::min(full, params.max_levels) : full;
}

// Levels 1.. of `levels` (all allocated with their extents) from level 0, `base`: levels[0]'s
// view, or the caller's pixels (levels[0] is then an empty placeholder).
template <typename T>
void reduce_chain(const ImageView<T>& base, std::vector<Image<T>>& levels, Executor& exec) {
  const int num_levels = static_cast<int>(levels.size());
  const int W = base.width(), H = base.height(), C = base.channels();
  const RowKernels<T> k = row_kernels<T>(exec.reference());

  // Fused levels 1..fused, strips of 2^fused level-0 rows. Only levels whose height is
  // H >> l >= 1 (no 2×1 boxes), and strips small enough to keep their level-1 rows cached
  // and numerous enough to keep every thread busy.
  int fused = std::min(num_levels - 1, kMaxFusedLevels);
  while (fused > 0 && (H >> fused) < 1) --fused;
  while (fused > 1 &&
         (size_t(1) << (fused - 1)) * size_t(mip_extent(W, 1)) * sizeof(T) > kStripCacheBytes)
    --fused;
  // An interleaved level 0 is reduced for all channels at once (its rows hold every channel):
  // tasks are strips, and the strip's fused levels follow per channel.
  const bool interleaved = !base.planar_rows();
  const int task_channels = interleaved ? 1 : C;
  while (fused > 1 && task_channels * ceil_div(H, int64_t(1) << fused) < 4 * int64_t(exec.threads())) --fused;
  auto src_view = [&](int l) { return l == 0 ? base : ImageView<T>(levels[l]); };

  if (fused >= 1) {
    const int64_t strip_rows = int64_t(1) << fused;
    const int64_t strips = ceil_div(H, strip_rows);
    const size_t strip_read_bytes = size_t(strip_rows) * size_t(W) * sizeof(T) * (interleaved ? C : 1);
    const int64_t grain = std::max<int64_t>(1, ceil_div(kMinTaskBytes, strip_read_bytes));
    exec.parallel_for(int64_t(task_channels) * strips, grain, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t strip = task % strips;
        for (int l = 1; l <= fused; ++l) {
          const int64_t y0 = (strip * strip_rows) >> l;
          const int64_t y1 = std::min<int64_t>(((strip + 1) * strip_rows) >> l, levels[l].height());
          if constexpr (std::is_same_v<T, uint8_t>) {
            if (interleaved && l == 1) {
              reduce_rows_interleaved(base, levels[1], static_cast<int>(y0), static_cast<int>(y1), exec.reference());
              continue;
            }
          }
          const ImageView<T> src = src_view(l - 1);
          if (interleaved) {
            for (int c = 0; c < C; ++c) reduce_rows(src, levels[l], c, static_cast<int>(y0), static_cast<int>(y1), k);
          } else {
            reduce_rows(src, levels[l], static_cast<int>(task / strips), static_cast<int>(y0), static_cast<int>(y1), k);
          }
        }
      }
    });
  }
  for (int l = fused + 1; l < num_levels; ++l) {
    if constexpr (std::is_same_v<T, uint8_t>) {
      if (interleaved && l == 1) {
        exec.parallel_for(levels[1].height(), 16, [&](int64_t y0, int64_t y1) {
          reduce_rows_interleaved(base, levels[1], static_cast<int>(y0), static_cast<int>(y1), exec.reference());
        });
        continue;
      }
    }
    reduce_level(src_view(l - 1), levels[l], k, exec);
  }
}

// Level 0 is `owned` (moved in) or, when `borrowed` is not null, the caller's view.
template <typename T>
Pyramid<T> build(Image<T> owned, const ImageView<T>* borrowed, const PyramidParams& params, Executor& exec) {
  const ImageView<T> base = borrowed ? *borrowed : ImageView<T>(owned);
  const int W = base.width(), H = base.height(), C = base.channels();
  const int num_levels = level_count("build_pyramid", W, H, params);
  std::vector<Image<T>> levels;
  levels.reserve(num_levels);
  levels.push_back(std::move(owned));  // empty when level 0 is borrowed
  for (int l = 1; l < num_levels; ++l) levels.emplace_back(mip_extent(W, l), mip_extent(H, l), C);
  reduce_chain(base, levels, exec);
  if (borrowed) return Pyramid<T>(base, std::move(levels));
  return Pyramid<T>(std::move(levels));
}

template <typename T>
void rebuild(Pyramid<T>& pyramid, const PyramidParams& params, Executor& exec) {
  std::vector<Image<T>>& levels = pyramid_detail::Access::levels(pyramid);
  if (levels.empty() || levels[0].empty())
    throw Error(Errc::invalid_argument, "rebuild_pyramid: the pyramid has no level 0");
  const int W = levels[0].width(), H = levels[0].height(), C = levels[0].channels();
  const int num_levels = level_count("rebuild_pyramid", W, H, params);
  levels.resize(size_t(num_levels));
  for (int l = 1; l < num_levels; ++l) {
    Image<T>& lv = levels[size_t(l)];
    const int w = mip_extent(W, l), h = mip_extent(H, l);
    if (lv.width() != w || lv.height() != h || lv.channels() != C) lv = Image<T>(w, h, C);
  }
  reduce_chain(ImageView<T>(levels[0]), levels, exec);
}

template <typename T>
void downsample(const Image<T>& src, Image<T>& dst, Executor& exec) {
  if (src.empty()) throw Error(Errc::invalid_argument, "downsample_2x2: the source image is empty");
  const int w = mip_extent(src.width(), 1), h = mip_extent(src.height(), 1);
  if (dst.width() != w || dst.height() != h || dst.channels() != src.channels())
    throw Error(Errc::invalid_argument,
                "downsample_2x2: destination is " +
                    extents(dst.width(), dst.height(), dst.channels()) + ", a " +
                    extents(src.width(), src.height(), src.channels()) + " source needs " +
                    extents(w, h, src.channels()));
  reduce_level(ImageView<T>(src), dst, row_kernels<T>(exec.reference()), exec);
}

}  // namespace

int full_mip_levels(int width, int height) {
  if (width < 1 || height < 1)
    throw Error(Errc::invalid_argument, "full_mip_levels: extents must be positive, got " +
                                            std::to_string(width) + "x" + std::to_string(height));
  int levels = 1;
  for (int n = std::max(width, height); n > 1; n >>= 1) ++levels;
  return levels;
}

PyramidU8 build_pyramid(ImageU8 base, const PyramidParams& params, Executor& exec) {
  if (base.empty()) throw Error(Errc::invalid_argument, "build_pyramid: the image is empty");
  return build<uint8_t>(std::move(base), nullptr, params, exec);
}
PyramidF32 build_pyramid(ImageF32 base, const PyramidParams& params, Executor& exec) {
  if (base.empty()) throw Error(Errc::invalid_argument, "build_pyramid: the image is empty");
  return build<float>(std::move(base), nullptr, params, exec);
}
PyramidU8 build_pyramid(const ImageViewU8& base, const PyramidParams& params, Executor& exec) {
  base.check("build_pyramid: the image");
  return build<uint8_t>(ImageU8(), &base, params, exec);
}

void rebuild_pyramid(PyramidU8& pyramid, const PyramidParams& params, Executor& exec) {
  rebuild(pyramid, params, exec);
}
void rebuild_pyramid(PyramidF32& pyramid, const PyramidParams& params, Executor& exec) {
  rebuild(pyramid, params, exec);
}

void downsample_2x2(const ImageU8& src, ImageU8& dst, Executor& exec) {
  downsample(src, dst, exec);
}
void downsample_2x2(const ImageF32& src, ImageF32& dst, Executor& exec) {
  downsample(src, dst, exec);
}

}  // namespace fovea
