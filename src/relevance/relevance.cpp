// Relevance: information (tile entropy), saliency (centre-surround on tile means) and query
// coupling (cortical magnification, regions, embedding similarity), one score per tile.
#include "fovea/relevance.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
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
  exec.parallel_for(g.tiles_y, 1, [&](int64_t ty0, int64_t ty1) {
    // Four interleaved sub-histograms per tile: consecutive pixels of a flat area fall into
    // the same bin, and one counter would serialise on store-to-load forwarding.
    std::vector<uint32_t> hist(size_t(g.tiles_x) * bins * 4);
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
        const uint32_t* h = hist.data() + size_t(tx) * bins * 4;
        float e = 0;
        for (int k = 0; k < bins; ++k) {
          const uint32_t count = h[k] + h[bins + k] + h[2 * bins + k] + h[3 * bins + k];
          if (count) {
            const float p = count / n;
            e -= p * std::log2(p);
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

bool finite(float v) { return std::isfinite(v); }

// Distance in pixels from point (px, py) to the rectangle [x0, x1) × [y0, y1).
float distance_to_box(float px, float py, float x0, float y0, float x1, float y1) {
  const float dx = std::max({x0 - px, 0.0f, px - x1});
  const float dy = std::max({y0 - py, 0.0f, py - y1});
  return std::sqrt(dx * dx + dy * dy);
}

std::vector<float> query_term(const PyramidU8& pyr, const TileGrid& g, const Query& q,
                              const RelevanceParams& params) {
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
      for (const Fixation& f : q.fixations)
        best = std::max(best, f.weight * falloff(distance_to_box(f.x_px, f.y_px, x0, y0, x1, y1), fixation_scale));
      for (const Region& r : q.regions) {
        // Box-to-box distance: zero when they overlap.
        const float dx = std::max({r.x0_px - x1, 0.0f, x0 - r.x1_px});
        const float dy = std::max({r.y0_px - y1, 0.0f, y0 - r.y1_px});
        best = std::max(best, r.weight * falloff(std::sqrt(dx * dx + dy * dy), region_scale(r)));
      }
      out[size_t(ty) * g.tiles_x + tx] = best;
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
  if (!finite(p.e0) || p.e0 <= 0) throw bad("e0 must be a finite number > 0");
  const RelevanceWeights& w = p.weights;
  for (float v : {w.information, w.saliency, w.query, w.floor})
    if (!finite(v) || v < 0) throw bad("relevance weights must be finite numbers >= 0");
}

}  // namespace

RelevanceMap compute_relevance(const PyramidU8& pyramid, int patch_px, const Query& query,
                               const RelevanceParams& params, Executor& exec) {
  if (pyramid.num_levels() == 0) throw Error(Errc::invalid_argument, "relevance of an empty pyramid");
  validate(query, params);
  RelevanceMap m;
  m.grid = TileGrid::make(pyramid.width(), pyramid.height(), patch_px);
  // The statistics level: the requested one, lowered until the patch divides evenly into it and
  // the pyramid has it.
  int level = params.stats_level;
  while (level > 0 && (level >= pyramid.num_levels() || patch_px % (1 << level) != 0)) --level;
  TileStats st = gather_tile_stats(pyramid.view(level), m.grid, level, params.entropy_bins, exec);
  m.saliency = saliency_from_means(st, m.grid, exec);
  m.information = std::move(st.entropy);
  m.query = query.empty() ? std::vector<float>(m.grid.tiles(), 0.0f)
                          : query_term(pyramid, m.grid, query, params);
  const RelevanceWeights& w = params.weights;
  m.score.resize(m.grid.tiles());
  for (int64_t t = 0; t < m.grid.tiles(); ++t)
    m.score[t] = w.floor + w.information * m.information[t] + w.saliency * m.saliency[t] +
                 w.query * m.query[t];
  return m;
}

std::string describe(const Query& q) {
  std::ostringstream s;
  s.precision(6);
  const char* sep = "";
  for (const Fixation& f : q.fixations) {
    s << sep << "fixation(" << f.x_px << "," << f.y_px;
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

}  // namespace fovea
