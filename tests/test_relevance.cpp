#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/relevance.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

PyramidU8 single_level(const ImageU8& img) {
  std::vector<ImageU8> levels;
  levels.push_back(img.clone());
  return PyramidU8(std::move(levels));
}

// The entropy and saliency terms, as they were the defaults before the detail term.
RelevanceParams with_stats() {
  RelevanceParams p;
  p.weights.information = 1.0f;
  p.weights.saliency = 0.5f;
  return p;
}

TEST(Relevance, ConstantImageHasNoInformationOrSaliency) {
  Executor exec;
  const PyramidU8 pyr = single_level(test::constant_image(200, 100, 3, 90));
  const RelevanceMap m = compute_relevance(pyr, 16, {}, with_stats(), exec);
  EXPECT_EQ(m.grid.tiles(), 13 * 7);
  for (int64_t t = 0; t < m.grid.tiles(); ++t) {
    EXPECT_EQ(m.information[t], 0.0f);
    EXPECT_NEAR(m.saliency[t], 0.0f, 1e-4f);
    EXPECT_EQ(m.query[t], 0.0f);
    EXPECT_NEAR(m.score[t], RelevanceWeights{}.floor, 1e-4f);
  }
}

TEST(Relevance, EntropyIsHighOnNoiseAndLowOnFlat) {
  ImageU8 img = test::constant_image(64, 32, 3, 50);
  const ImageU8 noise = test::random_image(32, 32, 3, 5);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) img.at(c, y, x + 32) = noise.at(c, y, x);
  Executor exec;
  const RelevanceMap m = compute_relevance(single_level(img), 16, {}, with_stats(), exec);
  EXPECT_EQ(m.information[0], 0.0f);
  EXPECT_GT(m.information[2], 0.85f);  // 256 px of uniform noise over 16 bins
  EXPECT_LE(m.information[2], 1.0f);
}

TEST(Relevance, SaliencyPeaksOnAnOddPatch) {
  ImageU8 img = test::constant_image(256, 256, 3, 100);
  for (int y = 160; y < 176; ++y)
    for (int x = 64; x < 80; ++x) {
      img.at(0, y, x) = 250;
      img.at(1, y, x) = 20;
    }
  Executor exec;
  const RelevanceMap m = compute_relevance(single_level(img), 16, {}, with_stats(), exec);
  const auto it = std::max_element(m.saliency.begin(), m.saliency.end());
  EXPECT_EQ(it - m.saliency.begin(), 10 * 16 + 4);
  EXPECT_FLOAT_EQ(*it, 1.0f);
}

TEST(Relevance, FixationTermFollowsCorticalMagnification) {
  Executor exec;
  const PyramidU8 pyr = single_level(test::constant_image(1000, 500, 3, 0));
  Query q;
  q.fixations.push_back({500, 250});
  RelevanceParams p;
  p.e0 = 0.1f;
  const RelevanceMap m = compute_relevance(pyr, 10, q, p, exec);
  auto at = [&](int tx, int ty) { return m.query[size_t(ty) * m.grid.tiles_x + tx]; };
  EXPECT_FLOAT_EQ(at(50, 25), 1.0f);  // the tile holding the fixation
  // e = 100 px / 1000 px = e0 -> e0 / (e + e0) = 1/2, measured to the tile's nearest point.
  EXPECT_NEAR(at(60, 25), 0.5f, 1e-6f);
  EXPECT_LT(at(90, 25), at(70, 25));
  EXPECT_GT(m.score[size_t(25) * m.grid.tiles_x + 50], m.score[0]);
}

TEST(Relevance, RegionIsFullInsideAndFallsOffOutside) {
  Executor exec;
  const PyramidU8 pyr = single_level(test::constant_image(320, 320, 1, 0));
  Query q;
  q.regions.push_back({100, 100, 140, 120});
  const RelevanceMap m = compute_relevance(pyr, 16, q, {}, exec);
  auto at = [&](int tx, int ty) { return m.query[size_t(ty) * m.grid.tiles_x + tx]; };
  EXPECT_FLOAT_EQ(at(6, 6), 1.0f);
  EXPECT_FLOAT_EQ(at(8, 7), 1.0f);
  EXPECT_LT(at(12, 6), 1.0f);
  EXPECT_GT(at(12, 6), at(18, 6));
}

TEST(Relevance, RegionFalloffScaleIsTheSmallerOfE0AndHalfTheRegion) {
  Executor exec;
  const PyramidU8 pyr = single_level(test::constant_image(2048, 2048, 1, 0));
  auto at = [](const RelevanceMap& m, int tx, int ty) { return m.query[size_t(ty) * m.grid.tiles_x + tx]; };
  // A 160 x 16 px line of text: the falloff halves at 8 px (half its height), not at
  // e0 · 2048 = 102.4 px.
  Query small;
  small.regions.push_back({1024, 1024, 1184, 1040});
  const RelevanceMap ms = compute_relevance(pyr, 16, small, {}, exec);
  EXPECT_FLOAT_EQ(at(ms, 64, 64), 1.0f);
  EXPECT_FLOAT_EQ(at(ms, 74, 64), 1.0f);                  // tile [1184, 1200) touches the box
  EXPECT_NEAR(at(ms, 75, 64), 8.0f / (16 + 8), 1e-6f);     // 16 px away
  EXPECT_NEAR(at(ms, 64, 70), 8.0f / (80 + 8), 1e-6f);  // tile row 70 starts at 1120: 80 px below
  // A large box keeps the fixation scale e0 · long side.
  Query large;
  large.regions.push_back({0, 0, 1600, 1600});
  const RelevanceMap ml = compute_relevance(pyr, 16, large, {}, exec);
  EXPECT_NEAR(at(ml, 105, 0), 102.4f / (80 + 102.4f), 1e-5f);  // tile x0 = 1680, 80 px away
}

TEST(Relevance, EmbeddingHookScoresCosineSimilarity) {
  Executor exec;
  const PyramidU8 pyr = single_level(test::constant_image(64, 64, 3, 0));
  RelevanceParams p;
  p.tile_features = [](const PyramidU8&, const TileGrid& g) {
    Tensor f(DType::f32, {g.tiles(), 2});
    for (int64_t t = 0; t < g.tiles(); ++t) {
      f.data<float>()[t * 2 + 0] = t == 5 ? 1.0f : 0.2f;
      f.data<float>()[t * 2 + 1] = t == 5 ? 0.0f : 1.0f;
    }
    return f;
  };
  Query q;
  q.embedding = {3.0f, 0.0f};
  const RelevanceMap m = compute_relevance(pyr, 16, q, p, exec);
  EXPECT_FLOAT_EQ(m.query[5], 1.0f);
  EXPECT_LT(m.query[0], 0.3f);
  q.embedding = {1.0f, 0.0f, 0.0f};
  EXPECT_THROW(compute_relevance(pyr, 16, q, p, exec), Error);
  RelevanceParams no_hook;
  try {
    compute_relevance(pyr, 16, q, no_hook, exec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "a query embedding needs per-tile features from an encoder (use 'fovea encode --model')");
  }
}

TEST(Relevance, InvalidQueriesAreErrors) {
  Executor exec;
  const PyramidU8 pyr = single_level(test::constant_image(64, 64, 3, 0));
  Query q;
  q.regions.push_back({10, 10, 5, 20});
  EXPECT_THROW(compute_relevance(pyr, 16, q, {}, exec), Error);
  Query nan;
  nan.fixations.push_back({std::nanf(""), 3});
  EXPECT_THROW(compute_relevance(pyr, 16, nan, {}, exec), Error);
  RelevanceParams p;
  p.e0 = 0;
  EXPECT_THROW(compute_relevance(pyr, 16, {}, p, exec), Error);
  p = {};
  p.weights.query = -1;
  EXPECT_THROW(compute_relevance(pyr, 16, {}, p, exec), Error);
}

TEST(Relevance, DescribesQueries) {
  Query q;
  EXPECT_EQ(describe(q), "none");
  q.fixations.push_back({10, 20});
  q.regions.push_back({1, 2, 3, 4, 0.5f});
  EXPECT_EQ(describe(q), "fixation(10,20) region(1,2,3,4;w=0.5)");
  q.fixations.push_back({5, 6, 1, 30});
  EXPECT_EQ(describe(q), "fixation(10,20) fixation(5,6;r=30) region(1,2,3,4;w=0.5)");
}

// Brute force of RelevanceMap::detail's definition, in double: per mip-(j+1) sample, 4^j ·
// Σ over its 2x2 mip-j block of (x − block mean)², summed over channels, given to the tile
// holding the sample's top-left level-0 pixel, or shared equally by the tiles whose top-left
// pixel the sample holds when it is larger than a tile.
std::vector<std::vector<double>> brute_detail(const PyramidU8& pyr, const TileGrid& g) {
  std::vector<std::vector<double>> T(pyr.num_levels() - 1, std::vector<double>(g.tiles(), 0.0));
  const int P = g.patch_px;
  for (int j = 0; j + 1 < pyr.num_levels(); ++j) {
    const ImageU8& a = pyr.level(j);
    const ImageU8& b = pyr.level(j + 1);
    if (a.width() < 2 || a.height() < 2) continue;
    const int64_t S = int64_t(2) << j;
    for (int y = 0; y < b.height(); ++y)
      for (int x = 0; x < b.width(); ++x) {
        double e = 0;
        for (int c = 0; c < a.channels(); ++c) {
          double v[4] = {double(a.at(c, 2 * y, 2 * x)), double(a.at(c, 2 * y, 2 * x + 1)),
                         double(a.at(c, 2 * y + 1, 2 * x)), double(a.at(c, 2 * y + 1, 2 * x + 1))};
          const double m = (v[0] + v[1] + v[2] + v[3]) / 4;
          for (double u : v) e += (u - m) * (u - m);
        }
        e *= std::pow(4.0, j);
        std::vector<size_t> tiles;
        if (S <= P) {
          const int tx = int(x * S / P), ty = int(y * S / P);
          if (tx < g.tiles_x && ty < g.tiles_y) tiles.push_back(size_t(ty) * g.tiles_x + tx);
        } else {
          for (int ty = 0; ty < g.tiles_y; ++ty)
            for (int tx = 0; tx < g.tiles_x; ++tx)
              if (int64_t(tx) * P >= x * S && int64_t(tx) * P < (x + 1) * S && int64_t(ty) * P >= y * S &&
                  int64_t(ty) * P < (y + 1) * S)
                tiles.push_back(size_t(ty) * g.tiles_x + tx);
        }
        for (size_t t : tiles) T[j][t] += e / double(tiles.size());
      }
  }
  return T;
}

TEST(Relevance, DetailIsTheMipErrorTileByTile) {
  // Odd, non-square sizes and a patch that is not a power of two.
  for (const auto& [w, h, P] : {std::tuple{333, 171, 14}, std::tuple{256, 200, 16}, std::tuple{97, 61, 8}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " P=" + std::to_string(P));
    Executor exec({.threads = 2});
    const PyramidU8 pyr = build_pyramid(test::random_image(w, h, 3, w), {}, exec);
    RelevanceParams p;
    p.weights.detail = 2.0f;
    p.fine_bias = 0;  // the plain squared error
    const RelevanceMap m = compute_relevance(pyr, P, {}, p, exec);
    // A fine bias only reweights the levels: mip j by max(2^(−bias·j), floor), up to the
    // normaliser.
    for (const float floor : {0.0f, 0.125f, 0.3f}) {
      RelevanceParams biased = p;
      biased.fine_bias = 1.5f;
      biased.fine_bias_floor = floor;
      const RelevanceMap mb = compute_relevance(pyr, P, {}, biased, exec);
      for (size_t j = 1; j < m.detail.size(); ++j) {
        const double weight = std::max<double>(floor, std::exp2(-1.5 * j));
        for (int64_t t = 0; t < m.grid.tiles(); t += 7)
          ASSERT_NEAR(mb.detail[j][t] * m.detail[0][t], m.detail[j][t] * mb.detail[0][t] * weight,
                      1e-3 * (1e-6 + m.detail[j][t] * mb.detail[0][t]))
              << j << " " << t << " floor " << floor;
      }
    }
    const auto T = brute_detail(pyr, m.grid);
    ASSERT_EQ(m.detail.size(), T.size());
    double total = 0;
    for (const auto& lv : T)
      for (double v : lv) total += v;
    EXPECT_NEAR(m.detail_scale, m.grid.tiles() / total, 1e-5 * m.grid.tiles() / total);
    double sum = 0;
    for (size_t j = 0; j < T.size(); ++j)
      for (int64_t t = 0; t < m.grid.tiles(); ++t) {
        // detail = weight · energy / mean energy per tile; no query, so no focus factor.
        ASSERT_NEAR(m.detail[j][t] / (2.0 * m.detail_scale), T[j][t], 1e-4 * (1 + T[j][t])) << j << " " << t;
        sum += m.detail_total[t];
      }
    EXPECT_NEAR(sum / T.size(), double(m.grid.tiles()), 1e-3 * m.grid.tiles());  // mean 1 a tile
  }
}

TEST(Relevance, ScoreIsThePriorPlusTheDetailTheAllocatorWeighs) {
  // The map the overlay and the token file show is what the allocation follows.
  Executor exec;
  const PyramidU8 pyr = build_pyramid(test::random_image(200, 150, 3, 8), {}, exec);
  for (bool with_query : {false, true}) {
    Query q;
    if (with_query) q.fixations.push_back({60, 70});
    const RelevanceMap m = compute_relevance(pyr, 16, q, {}, exec);
    ASSERT_EQ(m.prior.size(), m.score.size());
    ASSERT_FALSE(m.detail.empty());
    for (int64_t t = 0; t < m.grid.tiles(); ++t) {
      double want = m.prior[t];
      for (const auto& lv : m.detail) want += lv[t];
      ASSERT_NEAR(m.score[t], want, 1e-5 * want) << t;
      ASSERT_NEAR(m.prior[t], RelevanceWeights{}.floor + RelevanceWeights{}.query * m.query[t], 1e-5f);
    }
  }
}

TEST(Relevance, DetailNearAQueryIsCappedAtTheFocussedContent) {
  // A flat left half with a fixation on it, noise on the right half: the noise's detail is
  // capped at the flat focus's (none), so the query alone places the tokens.
  ImageU8 img = test::random_image(512, 256, 3, 12);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 256; ++y)
      for (int x = 0; x < 256; ++x) img.at(c, y, x) = 100;
  Executor exec;
  const PyramidU8 pyr = build_pyramid(img.clone(), {}, exec);
  Query q;
  q.fixations.push_back({64, 128});
  const RelevanceMap m = compute_relevance(pyr, 16, q, {}, exec);
  for (const auto& lv : m.detail)
    for (float v : lv) ASSERT_EQ(v, 0.0f);
  // The same query on the noise: the detail is there, shaped by the query.
  Query on_noise;
  on_noise.fixations.push_back({384, 128});
  const RelevanceMap n = compute_relevance(pyr, 16, on_noise, {}, exec);
  const size_t fixated = size_t(8) * n.grid.tiles_x + 24, far = 24;  // 112 px above it
  EXPECT_GT(n.detail[0][fixated], 10.0f * n.detail[0][far]);
  EXPECT_GT(n.detail[0][far], 0.0f);
}

TEST(Relevance, FlatImageHasNoDetailAndDetailCanBeTurnedOff) {
  Executor exec;
  const PyramidU8 pyr = build_pyramid(test::constant_image(300, 200, 3, 90), {}, exec);
  const RelevanceMap m = compute_relevance(pyr, 16, {}, {}, exec);
  ASSERT_FALSE(m.detail.empty());
  for (const auto& lv : m.detail)
    for (float v : lv) ASSERT_EQ(v, 0.0f);
  RelevanceParams off;
  off.weights.detail = 0;
  EXPECT_TRUE(compute_relevance(pyr, 16, {}, off, exec).detail.empty());
}

TEST(Relevance, FixationSpreadsAlongDetailedContent) {
  // A 32-px band of "print" across a flat image; a fixation on it. Along the band the query
  // term stays high much farther than across it, and with spread 1 the falloff is radial.
  ImageU8 img = test::constant_image(1024, 1024, 3, 120);
  const ImageU8 noise = test::random_image(1024, 32, 1, 3);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 1024; ++x)
      for (int c = 0; c < 3; ++c) img.at(c, 512 + y, x) = noise.at(0, y, x) > 127 ? 240 : 20;
  Executor exec;
  const PyramidU8 pyr = build_pyramid(img.clone(), {}, exec);
  Query q;
  q.fixations.push_back({512, 520});
  const RelevanceMap m = compute_relevance(pyr, 16, q, {}, exec);
  auto at = [&](const RelevanceMap& r, int tx, int ty) { return r.query[size_t(ty) * r.grid.tiles_x + tx]; };
  // 320 px to the right, on the band, vs 320 px below, off it.
  EXPECT_GT(at(m, 52, 32), 2.0f * at(m, 32, 52));
  RelevanceParams radial;
  radial.fixation_spread = 1.0f;
  const RelevanceMap r = compute_relevance(pyr, 16, q, radial, exec);
  EXPECT_NEAR(at(r, 52, 32), at(r, 32, 52), 0.02f);
  // Along the band the fovea reaches farther than the radial one, away from it less far.
  EXPECT_GT(at(m, 52, 32), at(r, 52, 32));
  EXPECT_LT(at(m, 32, 52), at(r, 32, 52));
  EXPECT_FLOAT_EQ(at(m, 32, 32), 1.0f);  // the fixated tile
}

TEST(Relevance, FixationRadiusIsFullInsideTheDisc) {
  Executor exec;
  const PyramidU8 pyr = single_level(test::constant_image(1024, 1024, 1, 0));
  Query q;
  q.fixations.push_back({512, 512, 1, 100});
  const RelevanceMap m = compute_relevance(pyr, 16, q, {}, exec);
  auto at = [&](int tx, int ty) { return m.query[size_t(ty) * m.grid.tiles_x + tx]; };
  EXPECT_FLOAT_EQ(at(32 + 5, 32), 1.0f);  // tile x0 = 592: 80 px away, inside the disc
  // Tile x0 = 720: 208 px away, 108 px outside the rim; scale min(0.05 · 1024, 100) = 51.2.
  EXPECT_NEAR(at(45, 32), 51.2f / (108 + 51.2f), 1e-5f);
  Query bad;
  bad.fixations.push_back({1, 2, 1, -3});
  EXPECT_THROW(compute_relevance(pyr, 16, bad, {}, exec), Error);
}

}  // namespace
}  // namespace fovea

#include <hwy/targets.h>

#include "relevance/stats.hpp"

namespace fovea {
namespace {

TEST(Relevance, SimdRowKernelsMatchReferenceOnEveryTarget) {
  using namespace relevance_detail;
  const ImageU8 img = test::random_image(300, 3, 3, 17);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int n : {0, 1, 7, 15, 16, 17, 31, 33, 63, 64, 65, 129, 300}) {
      std::vector<uint8_t> a(n + 1, 0xEE), b(n + 1, 0xEE);
      luma_row(img.row(0, 0), img.row(1, 0), img.row(2, 0), a.data(), n);
      luma_row_ref(img.row(0, 0), img.row(1, 0), img.row(2, 0), b.data(), n);
      ASSERT_EQ(a, b) << "luma n=" << n;  // also: nothing written past n
      std::vector<uint16_t> s(n + 1, 250), r(n + 1, 250);
      accumulate_row(img.row(1, 1), s.data(), n);
      accumulate_row_ref(img.row(1, 1), r.data(), n);
      ASSERT_EQ(s, r) << "accumulate n=" << n;
      const int blocks = n / 2;
      std::vector<uint32_t> e(blocks + 1, 7), f(blocks + 1, 7);
      block_energy_row(img.row(0, 1), img.row(2, 2), e.data(), blocks);
      block_energy_row_ref(img.row(0, 1), img.row(2, 2), f.data(), blocks);
      ASSERT_EQ(e, f) << "block energy n=" << n;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Relevance, StatisticsLevelOneIgnoresPixelNoiseAndCoversEdgeTiles) {
  // A 1-px checkerboard: two grey levels at level 0 (1 bit of entropy = 0.25 with 16 bins),
  // one flat grey at level 1 (its 2x2 means). 33 px: the last tile column is 1 px wide at
  // level 0 and gone from level 1's 16-px extent; it reads the level's last column.
  ImageU8 img = test::constant_image(33, 33, 3, 0);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 33; ++y)
      for (int x = 0; x < 33; ++x) img.at(c, y, x) = ((x + y) % 2) ? 255 : 0;
  Executor exec;
  const PyramidU8 pyr = build_pyramid(img.clone(), {}, exec);
  RelevanceParams at0 = with_stats();
  at0.stats_level = 0;
  const RelevanceMap m0 = compute_relevance(pyr, 16, {}, at0, exec);
  const RelevanceMap m1 = compute_relevance(pyr, 16, {}, with_stats(), exec);
  ASSERT_EQ(m1.grid.tiles(), 9);
  for (int64_t t = 0; t < 9; ++t) {
    EXPECT_NEAR(m0.information[t], t == 8 ? 0.0f : 0.25f, 0.01f) << t;  // tile 8: 1 pixel
    EXPECT_EQ(m1.information[t], 0.0f) << t;
    EXPECT_TRUE(std::isfinite(m1.score[t]));
  }
  // P = 14 is not a multiple of 4: a requested level 2 falls back to level 1 (7-px tiles).
  RelevanceParams at2 = with_stats();
  at2.stats_level = 2;
  const RelevanceMap m2 = compute_relevance(pyr, 14, {}, at2, exec);
  const RelevanceMap m2ref = compute_relevance(pyr, 14, {}, with_stats(), exec);
  EXPECT_EQ(m2.information, m2ref.information);
  RelevanceParams bad;
  bad.stats_level = 4;
  EXPECT_THROW(compute_relevance(pyr, 16, {}, bad, exec), Error);
}

// Small tiles with many bins take the entropy from the tile's sorted bins, not a histogram
// (fewer pixels than bins); larger ones from the histogram. Both must be the Shannon entropy of
// the tile's luma bins, edge tiles (cut by the image) included.
TEST(Relevance, EntropyOfTilesSmallerThanTheirBinsIsExact) {
  const ImageU8 img = test::random_image(41, 23, 3, 11);
  const PyramidU8 pyr = single_level(img);
  Executor exec;
  for (const auto& [patch, bins] : std::vector<std::pair<int, int>>{{3, 256}, {4, 256}, {4, 17}, {4, 16}, {5, 64}, {2, 2}, {16, 256}}) {
    RelevanceParams p = with_stats();
    p.stats_level = 0;
    p.entropy_bins = bins;
    const RelevanceMap m = compute_relevance(pyr, patch, {}, p, exec);
    ASSERT_EQ(m.grid.tiles_x, (41 + patch - 1) / patch);
    for (int ty = 0; ty < m.grid.tiles_y; ++ty)
      for (int tx = 0; tx < m.grid.tiles_x; ++tx) {
        std::vector<int> count(size_t(bins), 0);
        int n = 0;
        for (int y = ty * patch; y < std::min(23, ty * patch + patch); ++y)
          for (int x = tx * patch; x < std::min(41, tx * patch + patch); ++x, ++n) {
            const int luma = (77 * img.at(0, y, x) + 150 * img.at(1, y, x) + 29 * img.at(2, y, x) + 128) >> 8;
            ++count[size_t(luma * bins / 256)];
          }
        double e = 0;
        for (int c : count)
          if (c) e -= double(c) / n * std::log2(double(c) / n);
        const float want = float(std::min(1.0, e / std::log2(double(bins))));
        EXPECT_NEAR(m.information[size_t(ty) * m.grid.tiles_x + tx], want, 1e-5f)
            << "patch " << patch << " bins " << bins << " tile " << tx << "," << ty;
      }
  }
}

TEST(Relevance, ReferenceAndSimdKernelsGiveTheSameMap) {
  Executor best({.threads = 2});
  Executor ref({.threads = 1, .kernels = Kernels::reference});
  const PyramidU8 pyr = build_pyramid(test::random_image(333, 171, 3, 8), {}, ref);
  Query q;
  q.fixations.push_back({100, 50});
  const RelevanceMap a = compute_relevance(pyr, 14, q, with_stats(), best);
  const RelevanceMap b = compute_relevance(pyr, 14, q, with_stats(), ref);
  EXPECT_EQ(a.score, b.score);
  EXPECT_EQ(a.information, b.information);
  EXPECT_EQ(a.saliency, b.saliency);
  EXPECT_EQ(a.detail, b.detail);
  EXPECT_EQ(a.query, b.query);
}

}  // namespace
}  // namespace fovea

#include "fovea/tokenize.hpp"

namespace fovea {
namespace {

TEST(Relevance, TokenMetadataRecordsEveryAppliedKnob) {
  Executor exec;
  TokenizeParams p;
  p.alloc.budget_tokens = 40;
  p.alloc.lookahead = 2;
  p.relevance.fine_bias = 0.75f;
  p.relevance.fine_bias_floor = 0.25f;
  p.relevance.detail_focus = 2.0f;
  p.relevance.fixation_spread = 0.5f;
  p.relevance.weights.detail = 3.0f;
  const ImageU8 img = test::random_image(160, 96, 3, 2);
  const Tokenization t = tokenize(img.clone(), {}, p, exec);
  auto m = token_metadata(t, {}, p);
  EXPECT_EQ(m["relevance_weights"], "detail=3,query=8,floor=0.5,information=0,saliency=0");
  EXPECT_EQ(m["fine_bias"], "0.75");
  EXPECT_EQ(m["fine_bias_applied"], "0.75");
  EXPECT_EQ(m["fine_bias_floor"], "0.25");
  EXPECT_EQ(m["detail_focus"], "2");
  EXPECT_EQ(m["fixation_spread"], "0.5");
  EXPECT_EQ(m["lookahead"], "2");
  EXPECT_EQ(m["sharpness"], "1");
  EXPECT_FLOAT_EQ(std::stof(m["e0"]), 0.05f);
  EXPECT_EQ(m["max_level_requested"], "-1");
  // With a query the fine bias is not applied, and the file says so.
  Query q;
  q.fixations.push_back({10, 10});
  EXPECT_EQ(token_metadata(tokenize(img.clone(), q, p, exec), q, p)["fine_bias_applied"], "0");
  // A uniform layout depends on none of them.
  p.uniform = true;
  m = token_metadata(tokenize(img.clone(), {}, p, exec), {}, p);
  EXPECT_EQ(m.count("fine_bias"), 0u);
  EXPECT_EQ(m["mode"], "uniform");
}

}  // namespace
}  // namespace fovea
