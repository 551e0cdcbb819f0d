#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "fovea/allocate.hpp"
#include "fovea/error.hpp"
#include "fovea/relevance.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

RelevanceMap random_relevance(int w, int h, int P, uint32_t seed) {
  RelevanceMap m;
  m.grid = TileGrid::make(w, h, P);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.01f, 1.0f);
  m.score.resize(m.grid.tiles());
  for (float& s : m.score) s = u(rng);
  // Rate–distortion gains too, heavy-tailed like real detail energy (most tiles flat, a few
  // with text), so the invariants are checked with both parts of the priority.
  std::exponential_distribution<float> e(1.0f);
  for (int j = 0; j < resolve_max_level(m.grid, -1); ++j) {
    m.detail.emplace_back(m.grid.tiles());
    for (float& v : m.detail.back()) v = std::pow(e(rng), 3.0f) * std::ldexp(1.0f, j);
  }
  return m;
}

// The whole front half of tokenize: pyramid, relevance (no query) and allocation.
Allocation allocate_image(const ImageU8& img, int budget, const Query& q = {}) {
  Executor exec({.threads = 2});
  const PyramidU8 pyr = build_pyramid(img.clone(), {}, exec);
  return allocate(compute_relevance(pyr, 16, q, {}, exec), {.budget_tokens = budget});
}

// Every finest tile covered by exactly one token, and the rate map agrees with the tokens
// (the library's check_tiling, itself tested below on broken layouts).
void expect_exact_tiling(const Allocation& a) {
  const TilingReport r = check_tiling(a);
  EXPECT_TRUE(r.exact()) << "covered " << r.covered << "/" << r.tiles << ", overlapping " << r.overlapping
                         << ", outside " << r.outside << ", rate-map mismatches " << r.rate_map_mismatches;
}

TEST(TileGrid, CeilsAndValidates) {
  const TileGrid g = TileGrid::make(1000, 17, 16);
  EXPECT_EQ(g.tiles_x, 63);
  EXPECT_EQ(g.tiles_y, 2);
  EXPECT_EQ(g.tiles_x_at(1), 32);
  EXPECT_EQ(g.tiles_x_at(6), 1);
  EXPECT_EQ(g.token_px(3), 128);
  EXPECT_THROW(TileGrid::make(0, 5, 16), Error);
  EXPECT_THROW(TileGrid::make(5, 5, 1), Error);
  EXPECT_THROW(TileGrid::make(5, 5, 257), Error);
}

TEST(Allocate, TilesExactlyForManyShapes) {
  const int shapes[][3] = {{1, 1, 16},    {17, 5, 16},   {1000, 3, 16}, {3, 1000, 16}, {513, 1025, 16},
                           {224, 224, 14}, {640, 480, 14}, {97, 211, 7}, {2048, 512, 16}};
  for (const auto& s : shapes) {
    const RelevanceMap r = random_relevance(s[0], s[1], s[2], s[0] * 31 + s[1]);
    const int L = resolve_max_level(r.grid, -1);
    for (int64_t budget : {r.grid.tiles_at(L), r.grid.tiles_at(L) + 5, int64_t(100), r.grid.tiles() + 10}) {
      if (budget < r.grid.tiles_at(L)) continue;
      SCOPED_TRACE(std::to_string(s[0]) + "x" + std::to_string(s[1]) + " P=" + std::to_string(s[2]) +
                   " B=" + std::to_string(budget));
      const Allocation a = allocate(r, {.budget_tokens = static_cast<int>(budget)});
      expect_exact_tiling(a);
      EXPECT_LE(int64_t(a.layout.tokens.size()), budget);
    }
  }
}

TEST(Allocate, AutomaticLevelTokensFitInsideTheImage) {
  // The automatic coarsest level is the coarsest whose token still fits inside the image: no
  // token of an allocation is larger than the shorter side (a larger one would sample mostly
  // edge padding), and the next level up would not fit.
  const int sides[] = {1, 15, 16, 17, 31, 32, 100, 223, 224, 225, 447, 448, 511, 512, 513, 1000, 1024, 1500};
  const double aspects[] = {1.0, 4.0 / 3, 16.0 / 9, 2.0, 3.0, 0.5, 0.25};
  for (int P : {14, 16}) {
    for (int shorter : sides) {
      for (double aspect : aspects) {
        const int w = aspect >= 1 ? int(std::lround(shorter * aspect)) : shorter;
        const int h = aspect >= 1 ? shorter : int(std::lround(shorter / aspect));
        SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " P=" + std::to_string(P));
        const TileGrid g = TileGrid::make(w, h, P);
        const int L = resolve_max_level(g, -1);
        ASSERT_GE(L, 0);
        if (L > 0) {
          EXPECT_LE(g.token_px(L), std::min(w, h));
        }
        EXPECT_GT(g.token_px(L + 1), std::min(w, h));
        // The smallest budget it accepts, and one far above it: no token larger than the
        // shorter side either way (an image shorter than P has only P-px tokens).
        RelevanceMap r = random_relevance(w, h, P, uint32_t(w * 7 + h));
        for (int64_t budget : {g.tiles_at(L), g.tiles_at(L) + 40}) {
          const Allocation a = allocate(r, {.budget_tokens = int(budget)});
          EXPECT_EQ(a.max_level, L);
          EXPECT_EQ(a.coarsest_tokens, g.tiles_at(L));
          expect_exact_tiling(a);
          for (const Token& t : a.layout.tokens)
            ASSERT_LE(g.token_px(t.level), std::max<int64_t>(P, std::min(w, h))) << "level " << t.level;
        }
      }
    }
  }
  // 448² with 16-px patches: 4 tokens of 256 px, not one of 512 (a quarter of it padding).
  const TileGrid g448 = TileGrid::make(448, 448, 16);
  EXPECT_EQ(resolve_max_level(g448, -1), 4);
  EXPECT_EQ(g448.tiles_at(4), 4);
  // A side of exactly 2^L·P still gets the one token that covers it.
  EXPECT_EQ(TileGrid::make(512, 512, 16).tiles_at(resolve_max_level(TileGrid::make(512, 512, 16), -1)), 1);
  // An explicit level is kept (up to the single-node level), even past the shorter side.
  EXPECT_EQ(resolve_max_level(g448, 5), 5);
  EXPECT_EQ(resolve_max_level(g448, 9), 5);
}

TEST(Allocate, RespectsBudgetAndLandsWithinTwo) {
  const RelevanceMap r = random_relevance(1024, 768, 16, 7);
  for (int budget : {12, 13, 50, 64, 144, 273, 576, 1024, 2000, 3071}) {
    const Allocation a = allocate(r, {.budget_tokens = budget});
    const int64_t n = a.layout.tokens.size();
    EXPECT_LE(n, budget);
    EXPECT_GE(n, budget - 2) << "budget " << budget;
  }
  // A budget above the full-resolution count gives every tile at level 0.
  const Allocation full = allocate(r, {.budget_tokens = 5000});
  EXPECT_EQ(int64_t(full.layout.tokens.size()), r.grid.tiles());
  for (uint8_t l : full.rate_map.level) EXPECT_EQ(l, 0);
}

TEST(Allocate, LargerBudgetNeverLowersResolution) {
  const RelevanceMap r = random_relevance(800, 600, 16, 3);
  std::vector<uint8_t> prev;
  for (int budget = 4; budget <= 1900; budget += 37) {  // 4: 2x2 tokens of 512 px
    const Allocation a = allocate(r, {.budget_tokens = budget});
    if (!prev.empty()) {
      for (size_t i = 0; i < prev.size(); ++i) ASSERT_LE(a.rate_map.level[i], prev[i]) << "B=" << budget;
    }
    prev = a.rate_map.level;
  }
}

TEST(Allocate, SortedByLevelWithContiguousRuns) {
  const RelevanceMap r = random_relevance(640, 640, 16, 5);
  const Allocation a = allocate(r, {.budget_tokens = 273});
  const TokenLayout& lay = a.layout;
  ASSERT_EQ(lay.num_levels(), a.max_level + 1);
  EXPECT_EQ(lay.level_offsets.front(), 0);
  EXPECT_EQ(size_t(lay.level_offsets.back()), lay.tokens.size());
  for (int l = 0; l < lay.num_levels(); ++l)
    for (int i = lay.level_offsets[l]; i < lay.level_offsets[l + 1]; ++i) EXPECT_EQ(lay.tokens[i].level, l);
  EXPECT_TRUE(std::is_sorted(lay.tokens.begin(), lay.tokens.end(), [](const Token& p, const Token& q) {
    return std::tie(p.level, p.y, p.x) < std::tie(q.level, q.y, q.x);
  }));
}

TEST(Allocate, FixationPullsFineTokensToIt) {
  // Flat content, so only the query decides.
  const ImageU8 img = test::constant_image(1024, 1024, 3, 128);
  Executor exec({.threads = 1});
  std::vector<ImageU8> levels;
  levels.push_back(img.clone());
  const PyramidU8 pyr(std::move(levels));
  for (const auto& [fx, fy] : {std::pair{100.0f, 900.0f}, std::pair{700.0f, 200.0f}}) {
    Query q;
    q.fixations.push_back({fx, fy});
    const RelevanceMap r = compute_relevance(pyr, 16, q, {}, exec);
    const Allocation a = allocate(r, {.budget_tokens = 273});
    const TileGrid& g = r.grid;
    const int ftx = int(fx) / 16, fty = int(fy) / 16;
    EXPECT_EQ(a.rate_map.level[size_t(fty) * g.tiles_x + ftx], 0) << "fixation tile not at level 0";
    // Level falls monotonically (on average) with distance: near tiles finer than far ones.
    double near = 0, far = 0;
    int nn = 0, nf = 0;
    for (int ty = 0; ty < g.tiles_y; ++ty)
      for (int tx = 0; tx < g.tiles_x; ++tx) {
        const double d = std::hypot(tx - ftx, ty - fty);
        const int l = a.rate_map.level[size_t(ty) * g.tiles_x + tx];
        if (d < 4) near += l, ++nn;
        if (d > 30) far += l, ++nf;
      }
    EXPECT_LT(near / nn + 1.5, far / nf);
  }
}

TEST(Allocate, FlatImageGetsUniformResolutionWithoutAQuery) {
  // No detail anywhere: every tile is worth the same, so a budget that a level tiles exactly
  // gives exactly that level everywhere, and any other budget mixes two adjacent levels.
  const ImageU8 flat = test::constant_image(1024, 512, 3, 77);
  const Allocation a = allocate_image(flat, 128);  // 16 x 8 tokens of level 2
  ASSERT_EQ(a.layout.tokens.size(), 128u);
  for (uint8_t l : a.rate_map.level) ASSERT_EQ(l, 2);
  const Allocation b = allocate_image(flat, 300);
  const auto [lo, hi] = std::minmax_element(b.rate_map.level.begin(), b.rate_map.level.end());
  EXPECT_LE(*hi - *lo, 1);
}

TEST(Allocate, DetailedPatchOnAFlatBackgroundGetsTheFineTokens) {
  // A 64 x 64 px patch of "print" (random black/white pixels) on flat grey, no query. It is
  // one level-2 node (tiles 24..27 x 8..11), so exactly its 16 tiles can be at level 0.
  ImageU8 img = test::constant_image(768, 512, 3, 128);
  const ImageU8 noise = test::random_image(64, 64, 1, 9);
  const int px = 384, py = 128;
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64; ++x)
      for (int c = 0; c < 3; ++c) img.at(c, py + y, px + x) = noise.at(0, y, x) > 127 ? 250 : 10;
  const Allocation a = allocate_image(img, 40);
  const TileGrid& g = a.rate_map.grid;
  for (int ty = py / 16; ty < (py + 64) / 16; ++ty)
    for (int tx = px / 16; tx < (px + 64) / 16; ++tx)
      EXPECT_EQ(a.rate_map.level[size_t(ty) * g.tiles_x + tx], 0) << tx << "," << ty;
  // Everything else stays coarse: the patch's tiles are the only level-0 tokens.
  EXPECT_EQ(a.layout.count_at(0), 16);
}

TEST(Allocate, FixationStaysOnSmoothContentBesideSharperContent) {
  // A fixated "face" (mild texture) with a sharp, high-contrast "collar" 64 px below it: the
  // collar's detail must not pull the finest tokens off the fixation (the demo's case).
  ImageU8 img = test::random_image(512, 512, 3, 4);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 512; ++y)
      for (int x = 0; x < 512; ++x) img.at(c, y, x) = static_cast<uint8_t>(120 + img.at(c, y, x) / 32);
  const ImageU8 noise = test::random_image(128, 64, 1, 5);
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 128; ++x)
      for (int c = 0; c < 3; ++c) img.at(c, 192 + y, 192 + x) = noise.at(0, y, x) > 127 ? 250 : 5;
  Query q;
  q.fixations.push_back({256, 136});
  for (int budget : {64, 100, 273}) {
    SCOPED_TRACE(budget);
    const Allocation a = allocate_image(img, budget, q);
    expect_exact_tiling(a);
    const TileGrid& g = a.rate_map.grid;
    auto level = [&](int tx, int ty) { return int(a.rate_map.level[size_t(ty) * g.tiles_x + tx]); };
    EXPECT_EQ(level(16, 8), 0) << "the fixated tile is not at level 0";
    int collar_finest = 99;
    for (int ty = 12; ty < 16; ++ty)
      for (int tx = 12; tx < 20; ++tx) collar_finest = std::min(collar_finest, level(tx, ty));
    EXPECT_GE(collar_finest, level(16, 8));
  }
}

TEST(Allocate, LookaheadIsValidated) {
  const RelevanceMap r = random_relevance(256, 256, 16, 4);
  EXPECT_THROW(allocate(r, {.budget_tokens = 64, .lookahead = 0}), Error);
  EXPECT_THROW(allocate(r, {.budget_tokens = 64, .lookahead = 9}), Error);
  RelevanceMap bad = r;
  bad.detail[0][3] = -1.0f;
  EXPECT_THROW(allocate(bad, {.budget_tokens = 64}), Error);
}

TEST(Allocate, BudgetBelowCoarsestTilingIsAClearError) {
  const RelevanceMap r = random_relevance(2048, 512, 16, 1);  // coarsest: 4 tokens of 512 px
  try {
    allocate(r, {.budget_tokens = 3});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_EQ(std::string(e.what()),
              "budget of 3 tokens is below the coarsest tiling: 4 tokens of 512 px (level 5) cover the "
              "2048x512 image; raise the budget or the max level");
  }
  EXPECT_EQ(allocate(r, {.budget_tokens = 4}).layout.tokens.size(), 4u);
  // A lower max level makes the coarsest tiling finer, so it needs more tokens.
  EXPECT_THROW(allocate(r, {.budget_tokens = 100, .max_level = 2}), Error);
  EXPECT_THROW(allocate(r, {.budget_tokens = 100, .max_level = 25}), Error);
}

TEST(Allocate, ShadingRateCodesFollowVulkanEncoding) {
  RateMap m;
  m.level = {0, 1, 2, 3, 7};
  const std::vector<uint8_t> codes = m.shading_rate_codes();
  // VK_KHR_fragment_shading_rate: (log2 w << 2) | log2 h; 1x1=0, 2x2=5, 4x4=10 (largest).
  EXPECT_EQ(codes, (std::vector<uint8_t>{0, 5, 10, 10, 10}));
}

TEST(Allocate, DeterministicUnderTies) {
  RelevanceMap r;
  r.grid = TileGrid::make(512, 512, 16);
  r.score.assign(r.grid.tiles(), 1.0f);
  const Allocation a = allocate(r, {.budget_tokens = 100});
  const Allocation b = allocate(r, {.budget_tokens = 100});
  EXPECT_EQ(a.layout.tokens, b.layout.tokens);
  // Equal relevance refines breadth-first: levels differ by at most one across the image.
  const auto [lo, hi] = std::minmax_element(a.rate_map.level.begin(), a.rate_map.level.end());
  EXPECT_LE(*hi - *lo, 1);
}

TEST(UniformGrid, FitsBudgetAndKeepsAspect) {
  for (const auto& [w, h] : {std::pair{1024, 1024}, std::pair{1920, 1080}, std::pair{512, 2048}, std::pair{5000, 17}}) {
    for (int budget : {1, 64, 273, 1024}) {
      const UniformGrid u = uniform_grid(w, h, 16, budget);
      EXPECT_LE(u.tokens(), budget);
      EXPECT_GE(u.grid_x, 1);
      EXPECT_EQ(u.resized_width, u.grid_x * 16);
      if (u.grid_x > 3 && u.grid_y > 3) {
        EXPECT_NEAR(double(u.grid_x) / u.grid_y, double(w) / h, 0.3 * w / h);
      }
    }
  }
  EXPECT_EQ(uniform_grid(1024, 1024, 16, 273).tokens(), 256);  // 16×16, what a VLM would do
  const UniformGrid small = uniform_grid(100, 50, 16, 1000);   // native grid fits: 7×4
  EXPECT_EQ(small.grid_x, 7);
  EXPECT_EQ(small.grid_y, 4);
}


TEST(CheckTiling, SeesEveryKindOfBrokenLayout) {
  RelevanceMap m = random_relevance(300, 200, 16, 7);
  const Allocation good = allocate(m, {.budget_tokens = 60});
  ASSERT_TRUE(check_tiling(good).exact());
  ASSERT_GE(good.layout.tokens.size(), 2u);

  Allocation dropped = good;  // a tile left uncovered
  dropped.layout.tokens.pop_back();
  EXPECT_LT(check_tiling(dropped).covered, check_tiling(dropped).tiles);
  EXPECT_FALSE(check_tiling(dropped).exact());

  Allocation doubled = good;  // a token twice
  doubled.layout.tokens.push_back(doubled.layout.tokens.front());
  EXPECT_GT(check_tiling(doubled).overlapping, 0);

  Allocation outside = good;  // a node past its level's grid
  outside.layout.tokens.push_back({outside.rate_map.grid.tiles_x_at(0), 0, 0});
  EXPECT_EQ(check_tiling(outside).outside, 1);

  Allocation wrong_rate = good;  // the rate map disagrees with the tokens
  wrong_rate.rate_map.level[0] = uint8_t(wrong_rate.rate_map.level[0] + 1);
  EXPECT_EQ(check_tiling(wrong_rate).rate_map_mismatches, 1);
  EXPECT_FALSE(check_tiling(wrong_rate).exact());

  double area = 0;
  for (double f : check_tiling(good).area_per_level) area += f;
  EXPECT_NEAR(area, 1.0, 1e-9);
}

}  // namespace
}  // namespace fovea
