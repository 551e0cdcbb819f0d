// The windows foveation: where native-size windows go, which tokens they cover, and their
// patches (fovea/windows.hpp).
#include "fovea/windows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "extract/batch.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"

namespace fovea {

namespace {

using Box = std::array<float, 4>;

// A window's token (gx, gy): cells share their edges with their neighbours (the base view's
// cells need not be whole pixels), as the uniform baseline's do.
Box token_box(const TokenWindow& w, int gx, int gy) {
  const float cw = (w.box[2] - w.box[0]) / float(w.grid_x), ch = (w.box[3] - w.box[1]) / float(w.grid_y);
  return {w.box[0] + gx * cw, w.box[1] + gy * ch, gx + 1 == w.grid_x ? w.box[2] : w.box[0] + (gx + 1) * cw,
          gy + 1 == w.grid_y ? w.box[3] : w.box[1] + (gy + 1) * ch};
}

bool inside(const Box& b, const Box& outer) {
  constexpr float eps = 1e-3f;
  return b[0] >= outer[0] - eps && b[1] >= outer[1] - eps && b[2] <= outer[2] + eps && b[3] <= outer[3] + eps;
}

// Whether window `o` takes precedence over window `w` where they overlap: it is finer, or as fine
// and placed earlier.
bool precedes(const std::vector<TokenWindow>& ws, size_t o, size_t w) {
  const float a = ws[o].scale, b = ws[w].scale;
  if (a < b * (1 - 1e-4f)) return true;
  return a <= b * (1 + 1e-4f) && o < w;
}

// A strip: a window narrower than the native grid on a side (no query, on a line of detail).
bool is_strip(const TokenWindow& w, int G) { return w.level >= 0 && (w.grid_x < G || w.grid_y < G); }

// covered[w][i]: token i of window w lies wholly inside a native window that precedes w. Strips
// cover nothing: the base view's tokens under a line of text stay (a strip's features, a small
// image of its own, are no stand-in for the whole image's), the strip adds the line's detail.
std::vector<std::vector<uint8_t>> covered_tokens(const std::vector<TokenWindow>& ws, int G) {
  std::vector<std::vector<uint8_t>> cov(ws.size());
  for (size_t w = 0; w < ws.size(); ++w) {
    const TokenWindow& win = ws[w];
    cov[w].assign(size_t(win.tokens()), 0);
    for (size_t o = 0; o < ws.size(); ++o) {
      if (o == w || !precedes(ws, o, w) || is_strip(ws[o], G)) continue;
      const Box& ob = ws[o].box;
      if (ob[2] <= win.box[0] || ob[0] >= win.box[2] || ob[3] <= win.box[1] || ob[1] >= win.box[3]) continue;
      for (int gy = 0; gy < win.grid_y; ++gy)
        for (int gx = 0; gx < win.grid_x; ++gx)
          if (inside(token_box(win, gx, gy), ob)) cov[w][size_t(gy) * win.grid_x + gx] = 1;
    }
  }
  return cov;
}

int64_t kept_count(const std::vector<TokenWindow>& ws, int G, bool keep_covered) {
  int64_t n = 0;
  if (keep_covered) {
    for (const TokenWindow& w : ws) n += w.tokens();
    return n;
  }
  for (const auto& c : covered_tokens(ws, G))
    for (uint8_t v : c) n += v == 0;
  return n;
}

struct Geometry {
  int W, H, P, G, S;  // image, patch, native grid, native side (px)
};

TokenWindow base_view(const Geometry& g, int nx, int ny) {
  TokenWindow b;
  b.grid_x = nx;
  b.grid_y = ny;
  b.box = {0, 0, float(g.W), float(g.H)};
  b.level = -1;
  b.scale = float(std::sqrt(double(g.W) / (nx * g.P) * (double(g.H) / (ny * g.P))));
  b.kind = TokenWindow::Kind::base;
  return b;
}

TokenWindow base_view(const Geometry& g, int budget) {
  const int n = budget >= g.G * g.G ? g.G : std::max(1, int(std::floor(std::sqrt(double(budget)))));
  return base_view(g, n, n);
}

// A level-ℓ window centred on (cx, cy) as nearly as the image and the 2^ℓ lattice allow.
TokenWindow place(const Geometry& g, int level, double cx, double cy, TokenWindow::Kind kind) {
  const int side = g.S << level;
  auto origin = [&](double c, int extent) {
    int o = int(std::floor(c - side / 2.0 + 0.5));
    o = std::clamp(o, 0, extent - side);
    return (o >> level) << level;
  };
  TokenWindow w;
  const int x0 = origin(cx, g.W), y0 = origin(cy, g.H);
  w.box = {float(x0), float(y0), float(x0 + side), float(y0 + side)};
  w.grid_x = w.grid_y = g.G;
  w.level = level;
  w.scale = float(1 << level);
  w.kind = kind;
  return w;
}

// A level-0 window of gx × gy tokens with its top-left corner at (x0, y0) (whole tiles, inside the
// image): a strip shaped to a line of detail (text) that a square native window would cover with
// mostly other content.
TokenWindow place_rect(const Geometry& g, int x0, int y0, int gx, int gy) {
  TokenWindow w;
  w.box = {float(x0), float(y0), float(x0 + gx * g.P), float(y0 + gy * g.P)};
  w.grid_x = gx;
  w.grid_y = gy;
  w.level = 0;
  w.scale = 1;
  w.kind = TokenWindow::Kind::detail;
  return w;
}

// The per-tile state of the plan: the scale (original px per sample) each tile is seen at.
struct Coverage {
  const TileGrid& grid;
  std::vector<float> log_scale;  // log2 of the finest scale covering each tile's centre

  Coverage(const TileGrid& grid, float base_scale)
      : grid(grid), log_scale(size_t(grid.tiles()), std::log2(std::max(base_scale, 1.0f))) {}

  // Tiles whose centre lies in [x0, x1) (one axis).
  static std::pair<int, int> span(float a0, float a1, int P, int n) {
    const int t0 = std::clamp(int(std::ceil(a0 / P - 0.5f)), 0, n);
    const int t1 = std::clamp(int(std::ceil(a1 / P - 0.5f)), t0, n);
    return {t0, t1};
  }
  void add(const TokenWindow& w) {
    const float ls = std::log2(std::max(w.scale, 1.0f));
    const auto [x0, x1] = span(w.box[0], w.box[2], grid.patch_px, grid.tiles_x);
    const auto [y0, y1] = span(w.box[1], w.box[3], grid.patch_px, grid.tiles_y);
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        float& v = log_scale[size_t(y) * grid.tiles_x + x];
        v = std::min(v, ls);
      }
  }
};

// What seeing each tile at mip `level` instead of its current scale gains: the prior times the
// levels gained, plus the detail energy of the mip levels it newly resolves (a fractional
// current level resolves that share of its next level's energy).
// The prior's floor (its least value, the same on every tile) is left out: the base view already
// gives every tile its share, so a window is worth only what the query and the content add.
std::vector<double> tile_gain(const RelevanceMap& rel, const Coverage& cov, int level) {
  const size_t n = size_t(rel.grid.tiles());
  const std::vector<float>& prior = rel.prior.empty() ? rel.score : rel.prior;
  const float floor = prior.empty() ? 0.0f : *std::min_element(prior.begin(), prior.end());
  std::vector<double> g(n, 0.0);
  for (size_t t = 0; t < n; ++t) {
    const double L = cov.log_scale[t];
    if (L <= level + 1e-6) continue;
    double v = double(prior[t] - floor) * (L - level);
    for (size_t j = size_t(level); j < rel.detail.size() && double(j) < L; ++j)
      v += double(rel.detail[j][t]) * std::min(1.0, L - double(j));
    g[t] = v;
  }
  return g;
}

// Summed-area table over the tile grid.
struct Integral {
  int nx, ny;
  std::vector<double> s;
  Integral(const std::vector<double>& v, int nx, int ny) : nx(nx), ny(ny), s(size_t(nx + 1) * (ny + 1), 0.0) {
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x)
        s[size_t(y + 1) * (nx + 1) + x + 1] = v[size_t(y) * nx + x] + s[size_t(y) * (nx + 1) + x + 1] +
                                              s[size_t(y + 1) * (nx + 1) + x] - s[size_t(y) * (nx + 1) + x];
  }
  double sum(int x0, int y0, int x1, int y1) const {
    return s[size_t(y1) * (nx + 1) + x1] - s[size_t(y0) * (nx + 1) + x1] - s[size_t(y1) * (nx + 1) + x0] +
           s[size_t(y0) * (nx + 1) + x0];
  }
  double box(const TileGrid& g, const Box& b) const {
    const auto [x0, x1] = Coverage::span(b[0], b[2], g.patch_px, nx);
    const auto [y0, y1] = Coverage::span(b[1], b[3], g.patch_px, ny);
    return sum(x0, y0, x1, y1);
  }
};

// The strips' shapes (tokens across, down), for a native grid of G: full and half width, two to
// four tokens tall (and less than G).
std::vector<std::pair<int, int>> strip_shapes(int G) {
  std::vector<std::pair<int, int>> out;
  for (int gx : {G, (G + 1) / 2})
    for (int gy : {2, 3, 4}) {
      if (gy >= G || gy > gx) continue;
      if (std::find(out.begin(), out.end(), std::pair{gx, gy}) == out.end()) out.push_back({gx, gy});
    }
  return out;
}

struct Candidate {
  TokenWindow w;
  double gain;
};

// A chosen strip grown sideways (to at most the native width) while the tile column beside it
// holds at least a tenth of its mean column's gain: a line of text goes on where the strip's
// lattice cut it. `fits` says whether a grown strip still fits the budget.
template <typename Fits>
Candidate grow_strip(const Geometry& g, const RelevanceMap& rel, const Coverage& cov, TokenWindow w, Fits&& fits) {
  const TileGrid& tg = rel.grid;
  const Integral in(tile_gain(rel, cov, 0), tg.tiles_x, tg.tiles_y);
  double gain = in.box(tg, w.box);
  for (bool grew = true; grew && w.grid_x < g.G;) {
    grew = false;
    const double need = 0.1 * gain / w.grid_x;
    const float P = float(g.P);
    const double right = w.box[2] + P <= g.W ? in.box(tg, {w.box[2], w.box[1], w.box[2] + P, w.box[3]}) : -1;
    const double left = w.box[0] - P >= 0 ? in.box(tg, {w.box[0] - P, w.box[1], w.box[0], w.box[3]}) : -1;
    const bool go_right = right >= left;
    const double add = go_right ? right : left;
    if (add < need || !(add > 0)) break;
    TokenWindow x = place_rect(g, int(go_right ? w.box[0] : w.box[0] - P), int(w.box[1]), w.grid_x + 1, w.grid_y);
    if (!fits(x)) break;
    w = x;
    gain += add;
    grew = true;
  }
  return {w, gain};
}

struct Focus {
  double x, y;
};

std::vector<Focus> foci(const Query& q, int W, int H) {
  std::vector<Focus> f;
  for (const Fixation& x : q.fixations) f.push_back({std::clamp(double(x.x_px), 0.0, double(W)),
                                                     std::clamp(double(x.y_px), 0.0, double(H))});
  for (const Region& r : q.regions)
    f.push_back({std::clamp(0.5 * (r.x0_px + r.x1_px), 0.0, double(W)), std::clamp(0.5 * (r.y0_px + r.y1_px), 0.0, double(H))});
  return f;
}

// plan_windows' arguments checked: the geometry of the image's tiles and the windows' native grid.
Geometry checked_geometry(const RelevanceMap& rel, const WindowParams& p) {
  if (p.budget_tokens < 1) throw invalid_argument("budget must be at least 1 token, got " + std::to_string(p.budget_tokens));
  if (p.grid < 1 || p.grid > 256) throw invalid_argument("the windows' grid must be 1..256 tokens a side, got " + std::to_string(p.grid));
  if (p.max_windows < 1 || p.max_windows > 4096)
    throw invalid_argument("max_windows must be 1..4096, got " + std::to_string(p.max_windows));
  const TileGrid& tg = rel.grid;
  if (tg.tiles() < 1 || rel.score.size() != size_t(tg.tiles())) throw invalid_argument("plan_windows: the relevance map is empty");
  const Geometry g{tg.image_width, tg.image_height, tg.patch_px, p.grid, p.grid * tg.patch_px};
  if (int64_t(g.S) << 12 > std::numeric_limits<int>::max() / 2) throw invalid_argument("the windows' native size is too large");
  return g;
}

// A plan holding the base view alone.
WindowPlan base_plan(const Geometry& g, int budget_tokens) {
  WindowPlan plan;
  plan.patch_px = g.P;
  plan.image_width = g.W;
  plan.image_height = g.H;
  plan.windows.push_back(base_view(g, budget_tokens));
  return plan;
}

// Levels finer than the base view by half a level at least, whose windows fit in the image.
std::vector<int> window_levels(const Geometry& g, const TokenWindow& base) {
  std::vector<int> levels;
  if (base.grid_x == g.G)
    for (int l = 0; l < 24 && (int64_t(g.S) << l) <= std::min(g.W, g.H) && std::ldexp(std::sqrt(2.0), l) <= base.scale;
         ++l)
      levels.push_back(l);
  return levels;
}

// plan_windows' state while it adds windows to the base view: the plan so far, the scale it sees
// each tile at, the query's foci and the limits.
struct Planner {
  const RelevanceMap& rel;
  const WindowParams& p;
  const TileGrid& tg;
  const Geometry g;
  WindowPlan plan;
  std::vector<TokenWindow>& ws;  // plan.windows
  const float base_scale;
  const std::vector<int> levels;
  Coverage cov;
  const int64_t max_encoded;
  const std::vector<Focus> fs;
  double windows_gain = 0;  // what the windows after the query's gain, summed

  Planner(const RelevanceMap& rel, const Query& query, const WindowParams& p, const Geometry& g)
      : rel(rel), p(p), tg(rel.grid), g(g), plan(base_plan(g, p.budget_tokens)), ws(plan.windows),
        base_scale(ws[0].scale), levels(window_levels(g, ws[0])), cov(tg, base_scale),
        // The encoder reads at most 1.5 times the budget (or the base view and one window): windows
        // that mostly repeat others hand on few tokens and would make the encode cost far more than
        // a uniform grid's at the same budget.
        max_encoded(std::max<int64_t>(3 * int64_t(p.budget_tokens) / 2, ws[0].tokens() + int64_t(g.G) * g.G)),
        fs(foci(query, g.W, g.H)) {}
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;

  bool try_add(const TokenWindow& w) {
    if (int(ws.size()) >= p.max_windows) return false;
    ws.push_back(w);
    if (kept_count(ws, g.G, p.keep_covered) > p.budget_tokens) {
      ws.pop_back();
      return false;
    }
    cov.add(w);
    return true;
  }

  // 1. The query: a level-0 window on every focus not already well inside one.
  void add_query_windows() {
    if (levels.empty() || levels[0] != 0) return;
    for (const Focus& f : fs) {
      const float margin = g.S / 4.0f;
      bool seen = false;
      for (const TokenWindow& w : ws)
        if (w.level == 0 && f.x >= w.box[0] + margin && f.x < w.box[2] - margin && f.y >= w.box[1] + margin &&
            f.y < w.box[3] - margin)
          seen = true;
      if (!seen) try_add(place(g, 0, f.x, f.y, TokenWindow::Kind::query));
    }
  }

  // Level l's best few windows by gain: on the foci and at every tile position (plus the flush
  // right / bottom ones), and with no query, strips.
  void level_candidates(int l, std::vector<Candidate>& cands) const {
    const std::vector<double> gain = tile_gain(rel, cov, l);
    const Integral in(gain, tg.tiles_x, tg.tiles_y);
    std::vector<Candidate> at;
    for (const Focus& f : fs) {
      TokenWindow w = place(g, l, f.x, f.y, TokenWindow::Kind::query);
      at.push_back({w, in.box(tg, w.box)});
    }
    // Every tile position, plus the flush right / bottom ones.
    const int side = g.S << l;
    std::vector<int> xs, ys;
    for (int x = 0; x + side <= g.W; x += g.P) xs.push_back(x);
    for (int y = 0; y + side <= g.H; y += g.P) ys.push_back(y);
    xs.push_back(g.W - side);
    ys.push_back(g.H - side);
    for (int y : ys)
      for (int x : xs) {
        TokenWindow w = place(g, l, x + side / 2.0, y + side / 2.0, TokenWindow::Kind::detail);
        at.push_back({w, in.box(tg, w.box)});
      }
    // The exact cost (tokens handed on) is worked out for the best few by gain only.
    std::partial_sort(at.begin(), at.begin() + std::min<size_t>(at.size(), 8), at.end(),
                      [](const Candidate& a, const Candidate& b) { return a.gain > b.gain; });
    at.resize(std::min<size_t>(at.size(), 8));
    for (Candidate& c : at) cands.push_back(std::move(c));
    if (l == 0 && fs.empty()) strip_candidates(in, cands);
  }

  // With no query, level-0 windows narrower than native too: a line of text is a strip of
  // fine detail that a square window would spend most of its tokens beside. Per shape, the
  // best few by gain per token.
  void strip_candidates(const Integral& in, std::vector<Candidate>& cands) const {
    for (const auto& [gx, gy] : strip_shapes(g.G)) {
      if (gx * g.P > g.W || gy * g.P > g.H) continue;
      std::vector<Candidate> sat;
      for (int y = 0; y + gy * g.P <= g.H; y += g.P)
        for (int x = 0; x + gx * g.P <= g.W; x += g.P) {
          TokenWindow w = place_rect(g, x, y, gx, gy);
          const double gain = in.box(tg, w.box);
          // A line: its detail at least twice that of the bands as tall above it and below it
          // together (a page of text, a texture or a larger object continues there: square
          // windows or the uniform grid).
          const float h = float(gy * g.P);
          const double above = in.box(tg, {w.box[0], std::max(0.0f, w.box[1] - h), w.box[2], w.box[1]});
          const double below = in.box(tg, {w.box[0], w.box[3], w.box[2], std::min(float(g.H), w.box[3] + h)});
          if (gain >= 2 * (above + below)) sat.push_back({w, gain});
        }
      std::partial_sort(sat.begin(), sat.begin() + std::min<size_t>(sat.size(), 4), sat.end(),
                        [](const Candidate& a, const Candidate& b) { return a.gain > b.gain; });
      sat.resize(std::min<size_t>(sat.size(), 4));
      for (Candidate& c : sat) cands.push_back(std::move(c));
    }
  }

  // 2. One step of the greedy on the relevance: adds the candidate with the best gain per token
  // handed on (a strip grown sideways first). False when none fits.
  bool add_best() {
    std::vector<Candidate> cands;
    for (int l : levels) level_candidates(l, cands);
    const int64_t kept_now = kept_count(ws, g.G, p.keep_covered);
    int64_t encoded = 0;
    for (const TokenWindow& w : ws) encoded += w.tokens();
    double best_ratio = 0;
    int best = -1;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (!(cands[i].gain > 1e-9)) continue;
      ws.push_back(cands[i].w);
      const int64_t kept = kept_count(ws, g.G, p.keep_covered);
      ws.pop_back();
      if (kept > p.budget_tokens || encoded + cands[i].w.tokens() > max_encoded) continue;
      // Per token: those handed on, plus half a window for the encode (a window that mostly
      // repeats others hands on few tokens but costs a whole encode).
      const double cost = double(std::max<int64_t>(0, kept - kept_now)) + 0.5 * double(cands[i].w.tokens());
      const double ratio = cands[i].gain / cost;
      if (ratio > best_ratio) best_ratio = ratio, best = int(i);
    }
    if (best < 0) return false;
    Candidate chosen = cands[size_t(best)];
    if (is_strip(chosen.w, g.G)) chosen = grow_strip(g, rel, cov, chosen.w, [&](const TokenWindow& w) {
      ws.push_back(w);
      const bool fits = kept_count(ws, g.G, p.keep_covered) <= p.budget_tokens && encoded + w.tokens() <= max_encoded;
      ws.pop_back();
      return fits;
    });
    ws.push_back(chosen.w);
    cov.add(ws.back());
    windows_gain += chosen.gain;
    return true;
  }

  // 3. With no query, never coarser than a uniform grid where the windows resolve less: the
  // windows take their share of the image's detail (what resolving every tile at level 0 would
  // gain) all the way to full resolution; a uniform grid of the budget takes every tile
  // (log2 base scale − log2 uniform scale) / log2 base scale of the way there. When the detail
  // is spread so evenly (a page of text, a texture) that the windows' share is the smaller, the
  // plan is that grid alone (the uniform baseline, one sequence).
  void uniform_if_better() {
    if (!(fs.empty() && ws.front().grid_x == g.G && ws.front().grid_y == g.G)) return;
    const UniformGrid u = uniform_grid(g.W, g.H, g.P, p.budget_tokens);
    const double lb = std::log2(std::max(base_scale, 1.0f));
    if (u.tokens() > ws.front().tokens() && lb > 0) {
      const TokenWindow ub = base_view(g, u.grid_x, u.grid_y);
      const double way = (lb - std::log2(std::max(ub.scale, 1.0f))) / lb;
      double all = 0;
      for (double v : tile_gain(rel, Coverage(tg, base_scale), 0)) all += v;
      const double share = all > 0 ? windows_gain / all : 0.0;
      if (share < way) ws.assign(1, ub);
    }
  }
};

}  // namespace


std::string_view to_string(Foveation f) { return f == Foveation::windows ? "windows" : "mixed"; }

Foveation parse_foveation(std::string_view s) {
  if (s == "mixed") return Foveation::mixed;
  if (s == "windows") return Foveation::windows;
  throw invalid_argument("foveation must be 'windows' (native-size windows, for frozen towers) or 'mixed' (one sequence of "
            "mixed mip levels), got '" + std::string(s) + "'");
}

int64_t WindowPlan::encoded_tokens() const {
  int64_t n = 0;
  for (const TokenWindow& w : windows) n += w.tokens();
  return n;
}

int64_t WindowPlan::kept_tokens() const {
  int64_t n = 0;
  for (const auto& c : covered)
    for (uint8_t v : c) n += v == 0;
  return n;
}

int WindowPlan::pyramid_levels() const {
  int l = 0;
  for (const TokenWindow& w : windows) l = std::max(l, w.level);
  return l + 1;
}

RateMap WindowPlan::rate_map() const {
  RateMap r;
  r.grid = TileGrid::make(image_width, image_height, patch_px);
  r.level.assign(size_t(r.grid.tiles()), 0);
  for (int y = 0; y < r.grid.tiles_y; ++y)
    for (int x = 0; x < r.grid.tiles_x; ++x) {
      const float cx = std::min((x + 0.5f) * patch_px, image_width - 0.5f);
      const float cy = std::min((y + 0.5f) * patch_px, image_height - 0.5f);
      float best = std::numeric_limits<float>::infinity();
      for (const TokenWindow& w : windows)
        if (cx >= w.box[0] && cx < w.box[2] && cy >= w.box[1] && cy < w.box[3]) best = std::min(best, w.scale);
      if (!std::isfinite(best)) best = windows.empty() ? 1.0f : windows.front().scale;
      r.level[size_t(y) * r.grid.tiles_x + x] =
          uint8_t(std::clamp(std::lround(std::log2(std::max(best, 1.0f))), 0L, 255L));
    }
  return r;
}

int windows_pyramid_levels(int width, int height, int patch_px, int grid) {
  const double base = std::sqrt(double(width) * height) / (double(grid) * patch_px);
  const int want = base > 1 ? int(std::floor(std::log2(base))) + 2 : 1;
  return std::clamp(want, 1, full_mip_levels(width, height));
}

WindowPlan plan_windows(const RelevanceMap& rel, const Query& query, const WindowParams& p) {
  Planner pl(rel, query, p, checked_geometry(rel, p));
  pl.add_query_windows();
  while (int(pl.ws.size()) < p.max_windows && !pl.levels.empty())
    if (!pl.add_best()) break;
  pl.uniform_if_better();
  WindowPlan plan = std::move(pl.plan);
  plan.covered = covered_tokens(plan.windows, pl.g.G);
  if (p.keep_covered)
    for (auto& c : plan.covered) std::fill(c.begin(), c.end(), uint8_t(0));
  return plan;
}

TokenBatch extract_windows(const PyramidU8& pyramid, const WindowPlan& plan, const ExtractParams& params,
                           Executor& exec) {
  check_extract_params(params);
  if (plan.windows.empty()) throw invalid_argument("extract_windows: the plan has no window");
  if (pyramid.width() != plan.image_width || pyramid.height() != plan.image_height)
    throw invalid_argument("extract_windows: the plan was made for a different image size");
  if (plan.pyramid_levels() > pyramid.num_levels())
    throw invalid_argument("extract_windows: the plan samples mip level " + std::to_string(plan.pyramid_levels() - 1) +
              " but the pyramid has " + std::to_string(pyramid.num_levels()) + " levels");
  const int P = plan.patch_px;
  const int64_t n = plan.encoded_tokens();
  TokenBatch b = make_batch(n, P, params);
  b.windows = plan.windows;
  b.window = Tensor(DType::i32, {n});
  b.covered = Tensor(DType::u8, {n});
  b.level_offsets = {0, int32_t(n)};
  const RowWriter writer(params);
  const size_t elem = dtype_size(params.dtype);
  const size_t patch_bytes = size_t(3) * P * P * elem;
  float* pos = b.positions.data<float>();
  int32_t* lev = b.levels.data<int32_t>();
  int32_t* win = b.window.data<int32_t>();
  uint8_t* cov = b.covered.data<uint8_t>();
  int64_t row = 0;
  for (size_t wi = 0; wi < plan.windows.size(); ++wi) {
    const TokenWindow& w = plan.windows[wi];
    if (plan.covered.size() != plan.windows.size() || plan.covered[wi].size() != size_t(w.tokens()))
      throw invalid_argument("extract_windows: the plan's covered flags do not match its windows");
    // The window's pixels: the base view resized from level 0, the others where they lie in their mip.
    ImageU8 resized;
    ImageViewU8 src;
    int ox = 0, oy = 0;
    if (w.level < 0) {
      resized = resize_area(pyramid.view(0), w.grid_x * P, w.grid_y * P, exec);
      src = ImageViewU8(resized);
    } else {
      src = pyramid.view(w.level);
      ox = int(w.box[0]) >> w.level;
      oy = int(w.box[1]) >> w.level;
    }
    const float side = std::sqrt((w.box[2] - w.box[0]) / w.grid_x * ((w.box[3] - w.box[1]) / w.grid_y));
    const float level = w.level >= 0 ? float(w.level) : std::log2(side / float(P));
    const int64_t first = row;
    exec.parallel_for(w.tokens(), 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int gx = int(i % w.grid_x), gy = int(i / w.grid_x);
        const int64_t r = first + i;
        sample_block(src, ox + gx * P, oy + gy * P, P, writer, b.patches.bytes() + size_t(r) * patch_bytes, elem);
        const Box box = token_box(w, gx, gy);
        pos[r * 4 + 0] = 0.5f * (box[0] + box[2]);
        pos[r * 4 + 1] = 0.5f * (box[1] + box[3]);
        pos[r * 4 + 2] = side;
        pos[r * 4 + 3] = level;
        lev[r] = std::max(0, int(std::lround(level)));
        b.boxes[size_t(r)] = box;
        win[r] = int32_t(wi);
        cov[r] = plan.covered[wi][size_t(i)];
      }
    });
    row += w.tokens();
  }
  return b;
}

}  // namespace fovea
