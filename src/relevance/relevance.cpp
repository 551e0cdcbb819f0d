// Relevance: information (tile entropy), saliency (centre-surround on tile means) and query
// coupling (cortical magnification, regions, embedding similarity), one score per tile.
#include "fovea/relevance.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "fovea/error.hpp"
#include "relevance/stats.hpp"

namespace fovea {

namespace {

// Per-tile statistics gathered in one pass over level 0: luma histogram and channel sums.
struct TileStats {
  std::vector<float> entropy;  // [tiles], normalised to [0, 1]
  std::vector<float> mean[3];  // [tiles], channel means in [0, 255]
};

// `img` is pyramid level L; tile t covers the level-L pixels of its level-0 footprint, P >> L on a
// side. A footprint that the level's floor(n / 2^L) extent cut off entirely (a 1-px edge tile)
// is given the level's last row or column, so every tile has at least one pixel.
// `img` may be the caller's interleaved level 0 (stats_level 0 on a view): its rows are then
// gathered per channel into a scratch row before the row kernels read them.
TileStats gather_tile_stats(const ImageViewU8& img, const TileGrid& g, int level, int bins, Executor& exec) {
  const int P = g.patch_px >> level;
  auto span = [P](int t, int extent) {
    const int a = std::min(t * P, extent - 1);
    return std::pair<int, int>(a, std::max(a + 1, std::min(extent, t * P + P)));
  };
  const int C = img.channels();
  TileStats st;
  st.entropy.assign(g.tiles(), 0.0f);
  for (auto& m : st.mean) m.assign(g.tiles(), 0.0f);
  const float inv_log_bins = 1.0f / std::log2(static_cast<float>(bins));
  // Luma bin lookup: bin of an 8-bit luma value; a table keeps any bin count exact.
  uint8_t bin_of[256];
  for (int v = 0; v < 256; ++v) bin_of[v] = static_cast<uint8_t>(v * bins / 256);

  using namespace relevance_detail;
  const bool ref = exec.reference();
  // Tiles of fewer pixels than bins (small patches, many bins): the entropy is taken from the
  // tile's sorted bin indices instead of a histogram, so a tile costs O(pixels), not O(bins)
  // to clear and scan. Same counts, summed in the same bin order: the same floats.
  const bool sparse = int64_t(P) * P < bins;
  exec.parallel_for(g.tiles_y, 1, [&](int64_t ty0, int64_t ty1) {
    // Four interleaved sub-histograms per tile: consecutive pixels of a flat area fall into
    // the same bin, and one counter would serialise on store-to-load forwarding.
    std::vector<uint32_t> hist(sparse ? 0 : size_t(g.tiles_x) * bins * 4);
    // Sparse: the tile row's bin indices, P rows of the level's width, and one tile's, sorted.
    std::vector<uint8_t> binrows(sparse ? size_t(P) * img.width() : 0);
    std::vector<uint8_t> tilebins(sparse ? size_t(P) * P : 0);
    // Column sums over the tile row's P rows (u16: P <= 256 rows of 255), reduced per tile
    // once per tile row instead of once per pixel row.
    std::vector<uint16_t> colsum(size_t(C) * img.width());
    std::vector<uint8_t> luma(img.width());
    const ptrdiff_t ps = img.pixel_stride();
    std::vector<uint8_t> gathered(ps == 1 ? 0 : size_t(C) * img.width());
    const uint8_t* rows[3] = {};
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      std::fill(hist.begin(), hist.end(), 0u);
      std::fill(colsum.begin(), colsum.end(), uint16_t{0});
      const auto [y0, y1] = span(static_cast<int>(ty), img.height());
      for (int y = y0; y < y1; ++y) {
        for (int c = 0; c < C; ++c) {
          rows[c] = img.row(c, y);
          if (ps != 1) {
            uint8_t* d = gathered.data() + size_t(c) * img.width();
            for (int x = 0; x < img.width(); ++x) d[x] = rows[c][x * ps];
            rows[c] = d;
          }
        }
        for (int c = 0; c < C; ++c) {
          uint16_t* acc = colsum.data() + size_t(c) * img.width();
          if (ref) accumulate_row_ref(rows[c], acc, img.width());
          else accumulate_row(rows[c], acc, img.width());
        }
        const uint8_t* l = rows[0];
        if (C == 3) {
          if (ref) luma_row_ref(rows[0], rows[1], rows[2], luma.data(), img.width());
          else luma_row(rows[0], rows[1], rows[2], luma.data(), img.width());
          l = luma.data();
        }
        if (sparse) {
          uint8_t* b = binrows.data() + size_t(y - y0) * img.width();
          for (int x = 0; x < img.width(); ++x) b[x] = bin_of[l[x]];
          continue;
        }
        for (int tx = 0; tx < g.tiles_x; ++tx) {
          const auto [x0, x1] = span(tx, img.width());
          uint32_t* h = hist.data() + size_t(tx) * bins * 4;
          int x = x0;
          for (; x + 4 <= x1; x += 4) {
            ++h[bin_of[l[x + 0]]];
            ++h[bins + bin_of[l[x + 1]]];
            ++h[2 * bins + bin_of[l[x + 2]]];
            ++h[3 * bins + bin_of[l[x + 3]]];
          }
          for (; x < x1; ++x) ++h[bin_of[l[x]]];
        }
      }
      for (int tx = 0; tx < g.tiles_x; ++tx) {
        const auto [x0, x1] = span(tx, img.width());
        const float n = static_cast<float>((x1 - x0) * (y1 - y0));
        float e = 0;
        auto add = [&](uint32_t count) {
          const float p = count / n;
          e -= p * std::log2(p);
        };
        if (sparse) {
          size_t k = 0;
          for (int y = y0; y < y1; ++y) {
            const uint8_t* b = binrows.data() + size_t(y - y0) * img.width();
            for (int x = x0; x < x1; ++x) tilebins[k++] = b[x];
          }
          std::sort(tilebins.begin(), tilebins.begin() + ptrdiff_t(k));
          for (size_t i = 0; i < k;) {
            size_t j = i + 1;
            while (j < k && tilebins[j] == tilebins[i]) ++j;
            add(uint32_t(j - i));
            i = j;
          }
        } else {
          const uint32_t* h = hist.data() + size_t(tx) * bins * 4;
          for (int k = 0; k < bins; ++k) {
            const uint32_t count = h[k] + h[bins + k] + h[2 * bins + k] + h[3 * bins + k];
            if (count) add(count);
          }
        }
        const size_t t = size_t(ty) * g.tiles_x + tx;
        st.entropy[t] = std::clamp(e * inv_log_bins, 0.0f, 1.0f);
        for (int c = 0; c < 3; ++c) {
          const uint16_t* acc = colsum.data() + size_t(C == 3 ? c : 0) * img.width();
          uint32_t sum = 0;
          for (int x = x0; x < x1; ++x) sum += acc[x];
          st.mean[c][t] = sum / n;
        }
      }
    }
  });
  return st;
}

// Gaussian blur on the tile grid, edges clamped, approximated by three box blurs per axis
// (running sums: the cost does not grow with σ). Box width w with 3·(w² − 1)/12 = σ².
void box_blur_1d(const float* in, float* out, int n, size_t step, int radius) {
  // out[i] = mean of in[i - r .. i + r], indices clamped to [0, n): edge samples repeated.
  // The running sum only needs clamping near the ends; the interior is two loads an output.
  auto at = [&](int i) { return in[size_t(std::clamp(i, 0, n - 1)) * step]; };
  const float inv = 1.0f / float(2 * radius + 1);
  float acc = 0;
  for (int i = -radius; i <= radius; ++i) acc += at(i);
  const int lo = radius, hi = n - radius - 1;  // for i in [lo, hi) both i−r and i+r+1 are inside
  int i = 0;
  for (; i < std::min(lo, n); ++i) {
    out[size_t(i) * step] = acc * inv;
    acc += at(i + radius + 1) - at(i - radius);
  }
  for (; i < hi; ++i) {
    out[size_t(i) * step] = acc * inv;
    acc += in[size_t(i + radius + 1) * step] - in[size_t(i - radius) * step];
  }
  for (; i < n; ++i) {
    out[size_t(i) * step] = acc * inv;
    acc += at(i + radius + 1) - at(i - radius);
  }
}

std::vector<float> blur(const std::vector<float>& in, int w, int h, float sigma) {
  const int radius = std::max(1, static_cast<int>(std::lround((std::sqrt(4.0f * sigma * sigma + 1.0f) - 1.0f) / 2)));
  std::vector<float> a = in, b(in.size());
  for (int pass = 0; pass < 3; ++pass) {
    for (int y = 0; y < h; ++y) box_blur_1d(a.data() + size_t(y) * w, b.data() + size_t(y) * w, w, 1, radius);
    for (int x = 0; x < w; ++x) box_blur_1d(b.data() + x, a.data() + x, h, size_t(w), radius);
  }
  return a;
}

std::vector<float> saliency_from_means(const TileStats& st, const TileGrid& g, Executor& exec) {
  const int w = g.tiles_x, h = g.tiles_y;
  const size_t n = st.mean[0].size();
  // Opponent colour channels: intensity, red–green, blue–yellow.
  std::vector<float> ch[3];
  for (auto& c : ch) c.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float r = st.mean[0][i], gr = st.mean[1][i], b = st.mean[2][i];
    ch[0][i] = (r + gr + b) / 3.0f;
    ch[1][i] = r - gr;
    ch[2][i] = b - 0.5f * (r + gr);
  }
  // Centre (σ = 1) and surrounds (σ = 2, 4, 8 tiles) of each channel: 12 independent blurs.
  constexpr float kSigmas[4] = {1.0f, 2.0f, 4.0f, 8.0f};
  std::vector<float> blurred[3][4];
  exec.parallel_for(12, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) blurred[j / 4][j % 4] = blur(ch[j / 4], w, h, kSigmas[j % 4]);
  });
  std::vector<float> sal(n, 0.0f);
  for (int c = 0; c < 3; ++c)
    for (int s = 1; s < 4; ++s)
      for (size_t i = 0; i < n; ++i) {
        const float d = blurred[c][0][i] - blurred[c][s][i];
        sal[i] += d * d;
      }
  // Divide by the strongest contrast, but never by less than kMinContrast grey levels: a
  // nearly flat image must not have its rounding noise blown up into full saliency.
  constexpr float kMinContrast = 16.0f;
  float mx = kMinContrast;
  for (float& v : sal) mx = std::max(mx, v = std::sqrt(v));
  for (float& v : sal) v /= mx;
  return sal;
}

// Detail energy per tile and level: T[j][t] = Σ over the level-0 pixels of tile t of the squared
// error (summed over channels) added by representing mip j with mip j+1, measured exactly on
// the mips' 2x2 blocks (4 · Σ (x − block mean)², from block_energy_row) and scaled to level-0
// pixels (one mip-j sample stands for 4^j of them). A mip-(j+1) sample belongs to the tile
// holding its top-left level-0 pixel; a sample larger than a tile is shared equally by the
// tiles whose top-left pixel it holds. Mips one sample wide or tall (no 2x2 blocks) add none.
//
// `stale` (one entry per tile, or null for all): only the tiles it marks are measured again at
// the fine levels, the others keep the values T holds (T then has the right shape); the
// coarse levels, a few samples, are always measured in full. The sums are integers, so a
// tile's value does not depend on which others are measured with it.
void detail_energy_into(const PyramidU8& pyr, const TileGrid& g, Executor& exec, std::vector<std::vector<float>>& T,
                        const uint8_t* stale) {
  const int J = pyr.num_levels() - 1;
  const int C = pyr.channels();
  const int P = g.patch_px;
  if (!stale) T.assign(size_t(std::max(J, 0)), std::vector<float>(size_t(g.tiles()), 0.0f));
  auto usable = [&](int j) { return pyr.view(j).width() >= 2 && pyr.view(j).height() >= 2; };
  // Fine levels: a mip-(j+1) sample (2^(j+1) level-0 px) fits in a tile. Samples of tile row ty
  // are rows [first(ty), first(ty + 1)) of mip j+1, first(ty) = ceil(ty·P / 2^(j+1)).
  int fine = 0;
  while (fine < J && (2 << fine) <= P) ++fine;
  using namespace relevance_detail;
  const bool ref = exec.reference();
  exec.parallel_for(g.tiles_y, 1, [&](int64_t ty0, int64_t ty1) {
    std::vector<uint32_t> acc;
    std::vector<uint8_t> gathered;  // a borrowed, interleaved level 0: two rows of one channel
    for (int j = 0; j < fine; ++j) {
      if (!usable(j)) continue;
      const ImageViewU8 src = pyr.view(j);
      const ImageViewU8 dst = pyr.view(j + 1);
      const ptrdiff_t ps = src.pixel_stride();
      if (ps != 1) gathered.resize(2 * size_t(src.width()));
      auto rows = [&](int c, int y, const uint8_t** r0, const uint8_t** r1) {
        *r0 = src.row(c, 2 * y);
        *r1 = src.row(c, 2 * y + 1);
        if (ps == 1) return;
        uint8_t* d = gathered.data();
        for (int x = 0; x < src.width(); ++x) d[x] = (*r0)[x * ps], d[src.width() + x] = (*r1)[x * ps];
        *r0 = d;
        *r1 = d + src.width();
      };
      const int S = 2 << j;  // level-0 px per mip-(j+1) sample
      const int W = dst.width(), H = dst.height();
      const float scale = std::ldexp(1.0f, 2 * j - 2);  // 4^j / 4
      acc.assign(W, 0u);
      auto first = [&](int tx) { return std::min(W, (tx * P + S - 1) / S); };  // the tile's first sample
      for (int64_t ty = ty0; ty < ty1; ++ty) {
        const int y0 = std::min(H, int((ty * P + S - 1) / S)), y1 = std::min(H, int(((ty + 1) * P + S - 1) / S));
        if (y0 >= y1) continue;
        const uint8_t* st = stale ? stale + size_t(ty) * g.tiles_x : nullptr;
        float* out = T[j].data() + size_t(ty) * g.tiles_x;
        // Runs [a, b) of tiles to measure: the whole row, or each run of stale tiles.
        for (int a = 0; a < g.tiles_x;) {
          if (st && !st[a]) {
            ++a;
            continue;
          }
          int b = a + 1;
          while (b < g.tiles_x && (!st || st[b])) ++b;
          const int x0 = first(a), x1 = first(b);
          std::fill(acc.begin() + x0, acc.begin() + x1, 0u);
          for (int y = y0; y < y1 && x0 < x1; ++y)
            for (int c = 0; c < C; ++c) {
              const uint8_t *r0, *r1;
              rows(c, y, &r0, &r1);
              if (ref) block_energy_row_ref(r0 + 2 * x0, r1 + 2 * x0, acc.data() + x0, x1 - x0);
              else block_energy_row(r0 + 2 * x0, r1 + 2 * x0, acc.data() + x0, x1 - x0);
            }
          for (int tx = a; tx < b; ++tx) {
            uint64_t sum = 0;
            for (int x = first(tx); x < first(tx + 1); ++x) sum += acc[x];
            out[tx] = float(sum) * scale;
          }
          a = b;
        }
      }
    }
  });
  // Coarse levels: few samples, each shared by the tiles whose top-left pixel it holds.
  for (int j = fine; j < J; ++j) {
    if (stale) std::fill(T[j].begin(), T[j].end(), 0.0f);
    if (!usable(j)) continue;
    const ImageViewU8 src = pyr.view(j);
    const int W = pyr.view(j + 1).width(), H = pyr.view(j + 1).height();
    std::vector<uint8_t> r0(src.width()), r1(src.width());  // strided rows gathered (level 0 view)
    const int64_t S = int64_t(2) << j;
    const float scale = std::ldexp(1.0f, 2 * j - 2);
    std::vector<uint32_t> acc(W);
    for (int y = 0; y < H; ++y) {
      std::fill(acc.begin(), acc.end(), 0u);
      for (int c = 0; c < C; ++c) {
        for (int x = 0; x < src.width(); ++x)
          r0[x] = src.row(c, 2 * y)[x * src.pixel_stride()], r1[x] = src.row(c, 2 * y + 1)[x * src.pixel_stride()];
        block_energy_row_ref(r0.data(), r1.data(), acc.data(), W);
      }
      const int ty0 = int((y * S + P - 1) / P), ty1 = std::min<int64_t>(g.tiles_y, ((y + 1) * S + P - 1) / P);
      for (int x = 0; x < W; ++x) {
        const int tx0 = int((x * S + P - 1) / P), tx1 = std::min<int64_t>(g.tiles_x, ((x + 1) * S + P - 1) / P);
        if (tx0 >= tx1 || ty0 >= ty1) continue;
        const float share = float(acc[x]) * scale / float((tx1 - tx0) * (ty1 - ty0));
        for (int ty = ty0; ty < ty1; ++ty)
          for (int tx = tx0; tx < tx1; ++tx) T[j][size_t(ty) * g.tiles_x + tx] = share;
      }
    }
  }
}

bool finite(float v) { return std::isfinite(v); }

// Distance in pixels from point (px, py) to the rectangle [x0, x1) × [y0, y1).
float distance_to_box(float px, float py, float x0, float y0, float x1, float y1) {
  const float dx = std::max({x0 - px, 0.0f, px - x1});
  const float dy = std::max({y0 - py, 0.0f, py - y1});
  return std::sqrt(dx * dx + dy * dy);
}

// Distance in px from a fixation to every tile (to the tile's nearest point), shortened along
// content like the fixated one. `fine` is each tile's fine-detail energy (mip 0→1 and 1→2);
// when the fixated tiles are clearly more detailed than the image's average, the distance is a
// geodesic (a chamfer distance on the tile grid) in which a row step over content as detailed
// as the fixated one costs `spread` of its length, and any other step into unlike content
// costs kOffContent times its length. A fixation on a line of text then extends along the
// line and falls off quickly away from it. Otherwise (a fixation on flat or ordinary content)
// it is the Euclidean distance: the radial falloff.
std::vector<float> fixation_distance(const TileGrid& g, const Fixation& f, const std::vector<float>& fine,
                                     float spread, float* content_half_height_px) {
  *content_half_height_px = 0;
  const int P = g.patch_px, W = g.tiles_x, H = g.tiles_y;
  std::vector<float> d(g.tiles());
  for (int ty = 0; ty < H; ++ty)
    for (int tx = 0; tx < W; ++tx) {
      const float x0 = float(tx * P), y0 = float(ty * P);
      const float x1 = std::min<float>(x0 + P, g.image_width), y1 = std::min<float>(y0 + P, g.image_height);
      d[size_t(ty) * W + tx] = distance_to_box(f.x_px, f.y_px, x0, y0, x1, y1);
    }
  if (fine.empty() || spread >= 1.0f) return d;
  // Clamped as floats first: a fixation far outside the image (any finite value) must not
  // overflow the conversion to int.
  const int fx = int(std::clamp(f.x_px / float(P), 0.0f, float(W - 1)));
  const int fy = int(std::clamp(f.y_px / float(P), 0.0f, float(H - 1)));
  double mean = 0;
  for (float v : fine) mean += v;
  mean /= double(fine.size());
  float f0 = 0;  // the fixated content's detail: the most detailed tile next to the fixation
  for (int y = std::max(0, fy - 1); y <= std::min(H - 1, fy + 1); ++y)
    for (int x = std::max(0, fx - 1); x <= std::min(W - 1, fx + 1); ++x) f0 = std::max(f0, fine[size_t(y) * W + x]);
  constexpr double kDistinct = 2.0;  // the fixated content must stand out from the average
  if (!(f0 > kDistinct * mean) || f0 <= 0) return d;
  // px of distance per px crossed: along rows, `spread` on content like the fixated one and 1
  // on flat content; across rows, 1 on like content and kOffContent on unlike content, so the
  // fovea hugs the fixated content instead of filling a disc around it.
  constexpr float kOffContent = 2.0f;
  std::vector<float> cost(g.tiles()), off(g.tiles());
  std::vector<uint8_t> like(g.tiles());
  for (size_t t = 0; t < cost.size(); ++t) {
    const float a = std::min(1.0f, fine[t] / (0.5f * f0));
    cost[t] = 1.0f - (1.0f - spread) * a;
    off[t] = kOffContent - (kOffContent - 1.0f) * a;
    like[t] = a >= 1.0f;
  }
  // The fixated content's height: the run of like tiles through the fixation's column (or a
  // neighbour's, the fixation may sit in a gap between letters). Half of it is the size hint
  // a region's box would give.
  int best_run = 0;
  for (int x = std::max(0, fx - 1); x <= std::min(W - 1, fx + 1); ++x) {
    int y0 = fy, y1 = fy;
    if (!like[size_t(fy) * W + x]) continue;
    while (y0 > 0 && like[size_t(y0 - 1) * W + x]) --y0;
    while (y1 + 1 < H && like[size_t(y1 + 1) * W + x]) ++y1;
    best_run = std::max(best_run, y1 - y0 + 1);
  }
  *content_half_height_px = 0.5f * float(best_run * P);
  // The discount applies along rows only: text runs horizontally, and the lines above and
  // below a fixated one (a page) are as detailed but not what was looked at. Steps up, down
  // and diagonal cost their full length, so the fovea keeps its radial falloff across lines.
  // Geodesic from the fixation: seeded with the exact distance on the fixation's 3x3 tiles.
  std::vector<float> e(g.tiles(), std::numeric_limits<float>::infinity());
  for (int y = std::max(0, fy - 1); y <= std::min(H - 1, fy + 1); ++y)
    for (int x = std::max(0, fx - 1); x <= std::min(W - 1, fx + 1); ++x) e[size_t(y) * W + x] = d[size_t(y) * W + x];
  d.swap(e);
  const float diag = std::sqrt(2.0f) * P;
  auto relax = [&](int x, int y, int nx, int ny, float len, bool along) {
    if (nx < 0 || ny < 0 || nx >= W || ny >= H) return;
    const size_t a = size_t(y) * W + x, b = size_t(ny) * W + nx;
    const float via = d[b] + (along ? len * 0.5f * (cost[a] + cost[b]) : len * 0.5f * (off[a] + off[b]));
    if (via < d[a]) d[a] = via;
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        relax(x, y, x - 1, y, float(P), true);
        relax(x, y, x, y - 1, float(P), false);
        relax(x, y, x - 1, y - 1, diag, false);
        relax(x, y, x + 1, y - 1, diag, false);
      }
    for (int y = H - 1; y >= 0; --y)
      for (int x = W - 1; x >= 0; --x) {
        relax(x, y, x + 1, y, float(P), true);
        relax(x, y, x, y + 1, float(P), false);
        relax(x, y, x + 1, y + 1, diag, false);
        relax(x, y, x - 1, y + 1, diag, false);
      }
  }
  return d;
}

std::vector<float> query_term(const PyramidU8& pyr, const TileGrid& g, const Query& q,
                              const RelevanceParams& params, const std::vector<float>& fine) {
  std::vector<float> out(g.tiles(), 0.0f);
  const float long_side = static_cast<float>(std::max(g.image_width, g.image_height));
  // Cortical magnification M(e) = M0 / (e + e0), normalised to 1 at e = 0: in pixels,
  // scale / (d + scale) with scale = e0 · long side the distance at which it halves.
  const float fixation_scale = params.e0 * long_side;
  auto falloff = [](float dist_px, float scale) { return scale / (dist_px + scale); };
  // A region already says how far the interest extends: its falloff halves at half the
  // region's shorter side when that is nearer than e0 · long side. Otherwise a small box on a
  // large image (a line of text on a 2048 px photo) has a neighbourhood hundreds of pixels
  // wide scoring nearly as much as the box, and that neighbourhood takes the budget.
  auto region_scale = [&](const Region& r) {
    return std::min(fixation_scale, 0.5f * std::min(r.x1_px - r.x0_px, r.y1_px - r.y0_px));
  };
  const int P = g.patch_px;
  for (int ty = 0; ty < g.tiles_y; ++ty)
    for (int tx = 0; tx < g.tiles_x; ++tx) {
      // Distances are measured to the nearest point of the tile, so the tile holding a
      // fixation (or touching a region) scores its full weight.
      const float x0 = float(tx * P), y0 = float(ty * P);
      const float x1 = std::min<float>(x0 + P, g.image_width), y1 = std::min<float>(y0 + P, g.image_height);
      float best = 0;
      for (const Region& r : q.regions) {
        // Box-to-box distance: zero when they overlap.
        const float dx = std::max({r.x0_px - x1, 0.0f, x0 - r.x1_px});
        const float dy = std::max({r.y0_px - y1, 0.0f, y0 - r.y1_px});
        best = std::max(best, r.weight * falloff(std::sqrt(dx * dx + dy * dy), region_scale(r)));
      }
      out[size_t(ty) * g.tiles_x + tx] = best;
    }
  for (const Fixation& f : q.fixations) {
    // With a radius the fixation is a disc: full inside, falling off from its rim at the
    // smaller of e0 · long side and the radius (as a region's box does).
    float content_half_px = 0;
    const std::vector<float> dist = fixation_distance(g, f, fine, params.fixation_spread, &content_half_px);
    // The falloff scale: the radius when given, else the fixated content's half height when it
    // stands out (a line of small text falls off as its box would), never more than e0 · long
    // side.
    const float hint = f.radius_px > 0 ? f.radius_px : content_half_px;
    const float scale = hint > 0 ? std::min(fixation_scale, hint) : fixation_scale;
    for (size_t t = 0; t < out.size(); ++t)
      out[t] = std::max(out[t], f.weight * falloff(std::max(0.0f, dist[t] - f.radius_px), scale));
  }
  if (!q.embedding.empty()) {
    const Tensor feats = params.tile_features(pyr, g);
    const int64_t D = static_cast<int64_t>(q.embedding.size());
    if (feats.dtype() != DType::f32 || feats.rank() != 2 || feats.dim(0) != g.tiles() || feats.dim(1) != D)
      throw Error(Errc::invalid_argument,
                  "query embedding has " + std::to_string(D) +
                      " values but the tile features are not [tiles, " + std::to_string(D) + "] float32");
    double qn = 0;
    for (float v : q.embedding) qn += double(v) * v;
    qn = std::sqrt(qn);
    std::vector<float> sim(g.tiles(), 0.0f);
    float mx = 0;
    const float* f = feats.data<float>();
    for (int64_t t = 0; t < g.tiles(); ++t) {
      double dot = 0, fn = 0;
      for (int64_t d = 0; d < D; ++d) {
        dot += double(f[t * D + d]) * q.embedding[d];
        fn += double(f[t * D + d]) * f[t * D + d];
      }
      const double den = std::sqrt(fn) * qn;
      sim[t] = den > 0 ? static_cast<float>(std::max(0.0, dot / den)) : 0.0f;
      mx = std::max(mx, sim[t]);
    }
    for (int64_t t = 0; t < g.tiles(); ++t) out[t] = std::max(out[t], mx > 0 ? sim[t] / mx : 0.0f);
  }
  return out;
}

void validate(const Query& q, const RelevanceParams& p) {
  auto bad = [](const std::string& m) { return Error(Errc::invalid_argument, m); };
  for (const Fixation& f : q.fixations) {
    if (!finite(f.x_px) || !finite(f.y_px)) throw bad("fixation coordinates must be finite numbers");
    if (!finite(f.weight) || f.weight < 0) throw bad("fixation weight must be a finite number >= 0");
    if (!finite(f.radius_px) || f.radius_px < 0) throw bad("fixation radius must be a finite number >= 0");
  }
  for (const Region& r : q.regions) {
    if (!finite(r.x0_px) || !finite(r.y0_px) || !finite(r.x1_px) || !finite(r.y1_px))
      throw bad("region coordinates must be finite numbers");
    if (!(r.x1_px > r.x0_px) || !(r.y1_px > r.y0_px))
      throw bad("region must have x1 > x0 and y1 > y0");
    if (!finite(r.weight) || r.weight < 0) throw bad("region weight must be a finite number >= 0");
  }
  for (float v : q.embedding)
    if (!finite(v)) throw bad("query embedding values must be finite");
  if (!q.embedding.empty() && !p.tile_features)
    throw bad("a query embedding needs per-tile features from an encoder (use 'fovea encode --model')");
  if (p.stats_level < 0 || p.stats_level > 3) throw bad("statistics level must be in [0, 3]");
  if (p.entropy_bins < 2 || p.entropy_bins > 256) throw bad("entropy bins must be in [2, 256]");
  if (!finite(p.fixation_spread) || p.fixation_spread <= 0 || p.fixation_spread > 1)
    throw bad("fixation spread must be in (0, 1]");
  if (!finite(p.detail_focus) || p.detail_focus < 0 || p.detail_focus > 4) throw bad("detail focus must be in [0, 4]");
  if (!finite(p.fine_bias) || p.fine_bias < 0 || p.fine_bias > 4) throw bad("fine bias must be in [0, 4]");
  if (!finite(p.fine_bias_floor) || p.fine_bias_floor < 0 || p.fine_bias_floor > 1)
    throw bad("fine bias floor must be in [0, 1]");
  if (!finite(p.e0) || p.e0 <= 0) throw bad("e0 must be a finite number > 0");
  const RelevanceWeights& w = p.weights;
  for (float v : {w.information, w.saliency, w.query, w.floor, w.detail})
    if (!finite(v) || v < 0) throw bad("relevance weights must be finite numbers >= 0");
}

}  // namespace

// compute_relevance; with `cache`, the detail energy is the cache's, updated where `stale` marks
// (all of it when stale is null), and the cache is invalidated when the energy is not needed.
RelevanceMap relevance(const PyramidU8& pyramid, int patch_px, const Query& query, const RelevanceParams& params,
                       Executor& exec, RelevanceCache* cache, const uint8_t* stale) {
  if (pyramid.num_levels() == 0) throw Error(Errc::invalid_argument, "relevance of an empty pyramid");
  validate(query, params);
  RelevanceMap m;
  m.grid = TileGrid::make(pyramid.width(), pyramid.height(), patch_px);
  // The statistics level: the requested one, lowered until the patch divides evenly into it and
  // the pyramid has it.
  int level = params.stats_level;
  while (level > 0 && (level >= pyramid.num_levels() || patch_px % (1 << level) != 0)) --level;
  const RelevanceWeights& w = params.weights;
  const size_t n = size_t(m.grid.tiles());
  // Terms weighted 0 are not computed (their vectors are zeros): the tile statistics pass is
  // a full read of the statistics level.
  if (w.information > 0 || w.saliency > 0) {
    TileStats st = gather_tile_stats(pyramid.view(level), m.grid, level, params.entropy_bins, exec);
    m.saliency = w.saliency > 0 ? saliency_from_means(st, m.grid, exec) : std::vector<float>(n, 0.0f);
    m.information = std::move(st.entropy);
  } else {
    m.information.assign(n, 0.0f);
    m.saliency.assign(n, 0.0f);
  }
  m.detail_total.assign(n, 0.0f);
  std::vector<float> fine;  // fine-detail energy per tile (mips 0→1→2), for shaping fixations
  if (w.detail > 0 || (params.fixation_spread < 1.0f && !query.fixations.empty())) {
    if (cache) {
      detail_energy_into(pyramid, m.grid, exec, cache->energy, stale);
      cache->width = pyramid.width(), cache->height = pyramid.height(), cache->channels = pyramid.channels();
      cache->patch_px = patch_px, cache->levels = pyramid.num_levels();
      m.detail = cache->energy;
    } else {
      detail_energy_into(pyramid, m.grid, exec, m.detail, nullptr);
    }
    fine.assign(n, 0.0f);
    for (size_t j = 0; j < std::min<size_t>(2, m.detail.size()); ++j)
      for (size_t t = 0; t < n; ++t) fine[t] += m.detail[j][t];
  }
  else if (cache) cache->levels = 0;  // not measured: nothing to carry to the next frame
  m.query = query.empty() ? std::vector<float>(n, 0.0f) : query_term(pyramid, m.grid, query, params, fine);
  m.prior.resize(n);
  for (size_t t = 0; t < n; ++t)
    m.prior[t] = w.floor + w.information * m.information[t] + w.saliency * m.saliency[t] +
                 w.query * m.query[t];
  if (w.detail <= 0) m.detail.clear();
  if (w.detail > 0) {
    // Normalise by the image's mean energy per tile (its detail variance), floored at a
    // noise level of kNoiseGrey per channel so a nearly flat image is not amplified.
    constexpr double kNoiseGrey = 2.0;
    double total = 0;
    // The fine bias is a prior for when nobody says where to look; a query says it, and the
    // error inside its focus is then counted plainly.
    const float fine_bias = query.empty() ? params.fine_bias : 0.0f;
    // The bias never weights a level below fine_bias_floor: coarse structure still counts, so
    // a small budget is not spent on fine detail while large regions stay at their coarsest.
    for (size_t j = 0; j < m.detail.size(); ++j) {
      const float bias = std::max(query.empty() ? params.fine_bias_floor : 0.0f, std::exp2(-fine_bias * float(j)));
      for (float& v : m.detail[j]) total += (v *= bias);
    }
    std::vector<float> cap(m.detail.size(), std::numeric_limits<float>::infinity());
    if (!query.empty()) {
      // The fovea stays on what is looked at: near a query the detail decides the tokens' shape,
      // but content more detailed than the query's own (a sharp collar next to a fixated face)
      // must not pull the finest tokens off it. Each level's detail is capped at its largest
      // value inside the query's focus (the tiles whose query term is at least half its peak).
      const float qmax = *std::max_element(m.query.begin(), m.query.end());
      for (size_t j = 0; j < m.detail.size(); ++j) {
        cap[j] = 0;
        for (size_t t = 0; t < n; ++t)
          if (m.query[t] >= 0.5f * qmax) cap[j] = std::max(cap[j], m.detail[j][t]);
      }
    }
    const double floor_energy = double(m.grid.patch_px) * m.grid.patch_px * pyramid.channels() * kNoiseGrey * kNoiseGrey;
    const double z = std::max(total / double(n), floor_energy);
    m.detail_scale = float(1.0 / z);
    // Per-tile factor: weight · (1 + w_query · query)^focus / z (no pow without a query).
    std::vector<float> factor(n, float(w.detail / z));
    if (!query.empty())
      for (size_t t = 0; t < n; ++t)
        factor[t] *= params.detail_focus == 1.0f ? 1.0f + w.query * m.query[t]
                                                 : std::pow(1.0f + w.query * m.query[t], params.detail_focus);
    const float inv_z = float(1.0 / z);
    for (size_t j = 0; j < m.detail.size(); ++j)
      for (size_t t = 0; t < n; ++t) {
        float& v = m.detail[j][t];
        m.detail_total[t] += v * inv_z;
        v = std::min(v, cap[j]) * factor[t];
      }
  }
  m.score = m.prior;
  for (const auto& lv : m.detail)
    for (size_t t = 0; t < n; ++t) m.score[t] += lv[t];
  return m;
}

RelevanceMap compute_relevance(const PyramidU8& pyramid, int patch_px, const Query& query,
                               const RelevanceParams& params, Executor& exec) {
  return relevance(pyramid, patch_px, query, params, exec, nullptr, nullptr);
}

RelevanceMap compute_relevance(const PyramidU8& pyramid, int patch_px, const Query& query,
                               const RelevanceParams& params, Executor& exec, RelevanceCache& cache,
                               std::span<const uint8_t> changed) {
  if (pyramid.num_levels() == 0) throw Error(Errc::invalid_argument, "relevance of an empty pyramid");
  const TileGrid g = TileGrid::make(pyramid.width(), pyramid.height(), patch_px);
  if (!changed.empty() && int64_t(changed.size()) != g.tiles())
    throw Error(Errc::invalid_argument, "relevance: the changed-tile mask must have one entry per tile");
  const bool reuse = !changed.empty() && cache.levels == pyramid.num_levels() && cache.width == pyramid.width() &&
                     cache.height == pyramid.height() && cache.patch_px == patch_px &&
                     cache.channels == pyramid.channels() &&
                     cache.energy.size() == size_t(std::max(pyramid.num_levels() - 1, 0));
  std::vector<uint8_t> stale;
  if (reuse) {
    // A tile's samples at the fine levels reach at most one tile right and down (a sample not
    // dividing the tile), so a changed tile also makes the tiles left of, above and above-left
    // of it stale.
    stale.assign(changed.size(), 0);
    for (int ty = 0; ty < g.tiles_y; ++ty)
      for (int tx = 0; tx < g.tiles_x; ++tx)
        if (changed[size_t(ty) * g.tiles_x + tx])
          for (int y = std::max(0, ty - 1); y <= ty; ++y)
            for (int x = std::max(0, tx - 1); x <= tx; ++x) stale[size_t(y) * g.tiles_x + x] = 1;
  }
  cache.levels = 0;  // invalid until the energy is in (an exception leaves it so)
  return relevance(pyramid, patch_px, query, params, exec, &cache, reuse ? stale.data() : nullptr);
}

std::string describe(const Query& q) {
  std::ostringstream s;
  s.precision(6);
  const char* sep = "";
  for (const Fixation& f : q.fixations) {
    s << sep << "fixation(" << f.x_px << "," << f.y_px;
    if (f.radius_px > 0) s << ";r=" << f.radius_px;
    if (f.weight != 1) s << ";w=" << f.weight;
    s << ")";
    sep = " ";
  }
  for (const Region& r : q.regions) {
    s << sep << "region(" << r.x0_px << "," << r.y0_px << "," << r.x1_px << "," << r.y1_px;
    if (r.weight != 1) s << ";w=" << r.weight;
    s << ")";
    sep = " ";
  }
  if (!q.embedding.empty()) {
    s << sep << "embedding(" << q.embedding.size() << ")";
    sep = " ";
  }
  if (q.empty()) s << "none";
  return s.str();
}

std::vector<std::string> query_outside(const Query& q, int width, int height) {
  std::vector<std::string> out;
  const float w = float(width), h = float(height);
  for (const Fixation& f : q.fixations) {
    const float r = std::max(f.radius_px, 0.0f);
    if (f.x_px + r < 0 || f.y_px + r < 0 || f.x_px - r >= w || f.y_px - r >= h) {
      Query one;
      one.fixations.push_back(f);
      out.push_back(describe(one));
    }
  }
  for (const Region& g : q.regions)
    if (g.x1_px <= 0 || g.y1_px <= 0 || g.x0_px >= w || g.y0_px >= h) {
      Query one;
      one.regions.push_back(g);
      out.push_back(describe(one));
    }
  return out;
}

}  // namespace fovea
