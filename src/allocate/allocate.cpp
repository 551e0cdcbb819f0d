// Budgeted quadtree allocation (see allocate.hpp for the algorithm and its guarantees).
#include "fovea/allocate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <string>

#include "fovea/error.hpp"

namespace fovea {

namespace {

// Summed-area table over the tile scores, in double so node masses are exact enough that the
// split order does not depend on summation order.
class MassTable {
 public:
  MassTable(const std::vector<float>& score, int w, int h) : w_(w), sat_(size_t(w + 1) * (h + 1), 0.0) {
    for (int y = 0; y < h; ++y) {
      double row = 0;
      for (int x = 0; x < w; ++x) {
        row += score[size_t(y) * w + x];
        sat_[size_t(y + 1) * (w_ + 1) + x + 1] = sat_[size_t(y) * (w_ + 1) + x + 1] + row;
      }
    }
  }
  // Sum over tiles [x0, x1) × [y0, y1).
  double sum(int x0, int y0, int x1, int y1) const {
    auto at = [&](int x, int y) { return sat_[size_t(y) * (w_ + 1) + x]; };
    return at(x1, y1) - at(x0, y1) - at(x1, y0) + at(x0, y0);
  }

 private:
  int w_;
  std::vector<double> sat_;
};

struct Candidate {
  double priority;
  Token node;
};

struct Lower {
  // True when a should pop after b: lower priority, then lower level, then larger y, x.
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.node.level != b.node.level) return a.node.level < b.node.level;
    if (a.node.y != b.node.y) return a.node.y > b.node.y;
    return a.node.x > b.node.x;
  }
};

}  // namespace

int resolve_max_level(const TileGrid& grid, int max_level) {
  if (max_level < -1 || max_level > 24)
    throw Error(Errc::invalid_argument, "max level must be in [0, 24] (or -1 for automatic), got " +
                                            std::to_string(max_level));
  // Beyond the level where the grid is one node, coarser levels add nothing.
  int single = 0;
  while (grid.tiles_x_at(single) > 1 || grid.tiles_y_at(single) > 1) ++single;
  if (max_level >= 0) return std::min(max_level, single);
  // The coarsest token that still fits inside the image: one whose side reaches past the
  // shorter side samples mostly edge padding (a 512-px token on a 448² image is a quarter
  // padding), which a vision tower never saw in training.
  const int64_t shorter_px = std::min(grid.image_width, grid.image_height);
  int level = 0;
  while (grid.token_px(level + 1) <= shorter_px) ++level;
  return level;
}

std::vector<uint8_t> RateMap::shading_rate_codes() const {
  std::vector<uint8_t> codes(level.size());
  for (size_t i = 0; i < level.size(); ++i) {
    const int l = std::min<int>(level[i], 2);  // 4×4 is the largest rate Vulkan/D3D12 define
    codes[i] = static_cast<uint8_t>((l << 2) | l);
  }
  return codes;
}

namespace {

// What splitting a node of the quadtree gains: its prior mass weighted per level (2^(−α·ℓ), α
// from the sharpness) plus the detail gains of the levels it reaches, per extra token, best
// over splitting up to `lookahead` levels deep at once.
class SplitGains {
 public:
  SplitGains(const RelevanceMap& relevance, const std::vector<float>& prior, int L, const AllocParams& params)
      : g_(relevance.grid), mass_(prior, g_.tiles_x, g_.tiles_y), lookahead_(params.lookahead) {
    if (!(params.sharpness >= 0.5f && params.sharpness <= 4.0f))
      throw Error(Errc::invalid_argument, "sharpness must be in [0.5, 4], got " + std::to_string(params.sharpness));
    const double alpha = 2.0 - 1.0 / params.sharpness;
    level_scale_.resize(L + 1);  // 2^(−α·ℓ)
    for (int l = 0; l <= L; ++l) level_scale_[l] = std::exp2(-alpha * l);
    if (!(params.lookahead >= 1 && params.lookahead <= 8))
      throw Error(Errc::invalid_argument, "lookahead must be in [1, 8], got " + std::to_string(params.lookahead));
    // detail_[j]: the gain of going from mip j+1 to mip j, tile by tile; summed over a node at
    // level j+1 it is the gain of splitting it.
    for (size_t j = 0; j < relevance.detail.size() && int(j) < L; ++j) {
      if (relevance.detail[j].size() != size_t(g_.tiles()))
        throw Error(Errc::invalid_argument, "relevance detail level " + std::to_string(j) + " does not match its tile grid");
      for (float v : relevance.detail[j])
        if (!std::isfinite(v) || v < 0) throw Error(Errc::invalid_argument, "relevance detail must be finite and >= 0");
      detail_.emplace_back(relevance.detail[j], g_.tiles_x, g_.tiles_y);
    }
  }

  // The children of node n inside the grid (1 to 4) into out; how many.
  int children(const Token& n, Token* out) const {
    int k = 0;
    const int cl = n.level - 1;
    const int cw = g_.tiles_x_at(cl), ch = g_.tiles_y_at(cl);
    for (int dy = 0; dy < 2; ++dy)
      for (int dx = 0; dx < 2; ++dx) {
        const int cx = 2 * n.x + dx, cy = 2 * n.y + dy;
        if (cx < cw && cy < ch) out[k++] = Token{cx, cy, cl};
      }
    return k;
  }

  // Node n with the priority of splitting it (infinite for a node with one child: free).
  Candidate candidate(const Token& n) const {
    Token kids[4];
    const int k = children(n, kids);
    if (k == 1) return Candidate{std::numeric_limits<double>::infinity(), n};
    const int s = 1 << n.level;
    const int x0 = n.x * s, y0 = n.y * s;
    const int x1 = std::min(g_.tiles_x, (n.x + 1) * s), y1 = std::min(g_.tiles_y, (n.y + 1) * s);
    const double m = mass_.sum(x0, y0, x1, y1);
    // Gain per extra token of splitting the node d levels deep at once, best over d: detail
    // that only shows at fine levels (text strokes) is reached even when the first split
    // alone gains little.
    double best = 0, gain = 0;
    for (int d = 1; d <= std::min(lookahead_, int(n.level)); ++d) {
      const int l = n.level - d + 1;  // the level whose nodes split at this depth
      gain += m * level_scale_[l];
      if (l - 1 < int(detail_.size())) gain += detail_[l - 1].sum(x0, y0, x1, y1);
      // Tokens after splitting d levels deep: the level-(ℓ−d) nodes inside the node.
      const int c = n.level - d;
      const int64_t nodes = int64_t(std::min(g_.tiles_x_at(c), (n.x + 1) << d) - (n.x << d)) *
                            (std::min(g_.tiles_y_at(c), (n.y + 1) << d) - (n.y << d));
      best = std::max(best, gain / double(nodes - 1));
    }
    return Candidate{best, n};
  }

 private:
  const TileGrid& g_;
  MassTable mass_;
  std::vector<MassTable> detail_;
  std::vector<double> level_scale_;
  int lookahead_;
};

// The allocation of `tokens` (any order): sorted by level, then row, then column, with the
// per-level offsets and the rate map (each tile's token level).
Allocation assemble(std::vector<Token> tokens, const TileGrid& g, int L, int budget, int64_t coarsest) {
  Allocation a;
  a.budget_tokens = budget;
  a.max_level = L;
  a.coarsest_tokens = coarsest;
  std::sort(tokens.begin(), tokens.end(), [](const Token& p, const Token& q) {
    if (p.level != q.level) return p.level < q.level;
    if (p.y != q.y) return p.y < q.y;
    return p.x < q.x;
  });
  a.layout.level_offsets.assign(L + 2, 0);
  for (const Token& t : tokens) ++a.layout.level_offsets[t.level + 1];
  for (int l = 0; l <= L; ++l) a.layout.level_offsets[l + 1] += a.layout.level_offsets[l];

  a.rate_map.grid = g;
  a.rate_map.level.assign(g.tiles(), 0);
  for (const Token& t : tokens) {
    const int s = 1 << t.level;
    for (int y = t.y * s; y < std::min(g.tiles_y, (t.y + 1) * s); ++y)
      for (int x = t.x * s; x < std::min(g.tiles_x, (t.x + 1) * s); ++x)
        a.rate_map.level[size_t(y) * g.tiles_x + x] = static_cast<uint8_t>(t.level);
  }
  a.layout.tokens = std::move(tokens);
  return a;
}

}  // namespace

Allocation allocate(const RelevanceMap& relevance, const AllocParams& params) {
  const TileGrid& g = relevance.grid;
  // The prior mass: RelevanceMap::prior, or the score of a map without one (built by hand).
  const std::vector<float>& prior = relevance.prior.empty() ? relevance.score : relevance.prior;
  if (prior.size() != size_t(g.tiles()))
    throw Error(Errc::invalid_argument, "relevance map does not match its tile grid");
  for (float s : prior)
    if (!std::isfinite(s) || s < 0)
      throw Error(Errc::invalid_argument, "relevance scores must be finite and >= 0");
  const int L = resolve_max_level(g, params.max_level);
  const int64_t coarsest = g.tiles_at(L);
  if (params.budget_tokens < coarsest)
    throw Error(Errc::invalid_argument,
                "budget of " + std::to_string(params.budget_tokens) +
                    " tokens is below the coarsest tiling: " + std::to_string(coarsest) +
                    " tokens of " + std::to_string(g.token_px(L)) + " px (level " + std::to_string(L) +
                    ") cover the " + std::to_string(g.image_width) + "x" +
                    std::to_string(g.image_height) + " image; raise the budget or the max level");
  const SplitGains gains(relevance, prior, L, params);

  // Split the most valuable node while the budget allows: a node with k children adds k − 1 tokens.
  std::priority_queue<Candidate, std::vector<Candidate>, Lower> heap;
  std::vector<Token> tokens;  // final level-0 tokens, then the unsplit nodes
  for (int y = 0; y < g.tiles_y_at(L); ++y)
    for (int x = 0; x < g.tiles_x_at(L); ++x) {
      const Token t{x, y, L};
      if (L == 0) tokens.push_back(t);
      else heap.push(gains.candidate(t));
    }
  int64_t count = coarsest;
  while (!heap.empty()) {
    const Candidate top = heap.top();
    Token kids[4];
    const int k = gains.children(top.node, kids);
    if (count + (k - 1) > params.budget_tokens) break;
    heap.pop();
    count += k - 1;
    for (int i = 0; i < k; ++i) {
      if (kids[i].level == 0) tokens.push_back(kids[i]);
      else heap.push(gains.candidate(kids[i]));
    }
  }
  tokens.reserve(count);
  while (!heap.empty()) {
    tokens.push_back(heap.top().node);
    heap.pop();
  }
  return assemble(std::move(tokens), g, L, params.budget_tokens, coarsest);
}

UniformGrid uniform_grid(int width, int height, int patch_px, int budget_tokens) {
  const TileGrid g = TileGrid::make(width, height, patch_px);
  if (budget_tokens < 1)
    throw Error(Errc::invalid_argument, "budget must be at least 1 token, got " + std::to_string(budget_tokens));
  UniformGrid u;
  if (g.tiles() <= budget_tokens) {
    u.grid_x = g.tiles_x;
    u.grid_y = g.tiles_y;
  } else {
    // Largest scale s with floor(w·s/P) · floor(h·s/P) <= budget: start from the ideal
    // continuous scale and step down until the floors fit.
    double s = std::sqrt(double(budget_tokens) * patch_px * patch_px / (double(width) * height));
    for (;;) {
      u.grid_x = std::max(1, static_cast<int>(std::floor(width * s / patch_px)));
      u.grid_y = std::max(1, static_cast<int>(std::floor(height * s / patch_px)));
      if (u.tokens() <= budget_tokens) break;
      s *= 0.999;
    }
  }
  u.resized_width = u.grid_x * patch_px;
  u.resized_height = u.grid_y * patch_px;
  return u;
}

}  // namespace fovea
