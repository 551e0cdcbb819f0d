#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

TEST(Relevance, ConstantImageHasNoInformationOrSaliency) {
  Executor exec;
  const PyramidU8 pyr = single_level(test::constant_image(200, 100, 3, 90));
  const RelevanceMap m = compute_relevance(pyr, 16, {}, {}, exec);
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
  const RelevanceMap m = compute_relevance(single_level(img), 16, {}, {}, exec);
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
  const RelevanceMap m = compute_relevance(single_level(img), 16, {}, {}, exec);
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
  RelevanceParams at0;
  at0.stats_level = 0;
  const RelevanceMap m0 = compute_relevance(pyr, 16, {}, at0, exec);
  const RelevanceMap m1 = compute_relevance(pyr, 16, {}, {}, exec);
  ASSERT_EQ(m1.grid.tiles(), 9);
  for (int64_t t = 0; t < 9; ++t) {
    EXPECT_NEAR(m0.information[t], t == 8 ? 0.0f : 0.25f, 0.01f) << t;  // tile 8: 1 pixel
    EXPECT_EQ(m1.information[t], 0.0f) << t;
    EXPECT_TRUE(std::isfinite(m1.score[t]));
  }
  // P = 14 is not a multiple of 4: a requested level 2 falls back to level 1 (7-px tiles).
  RelevanceParams at2;
  at2.stats_level = 2;
  const RelevanceMap m2 = compute_relevance(pyr, 14, {}, at2, exec);
  const RelevanceMap m2ref = compute_relevance(pyr, 14, {}, {}, exec);
  EXPECT_EQ(m2.information, m2ref.information);
  RelevanceParams bad;
  bad.stats_level = 4;
  EXPECT_THROW(compute_relevance(pyr, 16, {}, bad, exec), Error);
}

TEST(Relevance, ReferenceAndSimdKernelsGiveTheSameMap) {
  Executor best({.threads = 2});
  Executor ref({.threads = 1, .kernels = Kernels::reference});
  const PyramidU8 pyr = build_pyramid(test::random_image(333, 171, 3, 8), {}, ref);
  Query q;
  q.fixations.push_back({100, 50});
  const RelevanceMap a = compute_relevance(pyr, 14, q, {}, best);
  const RelevanceMap b = compute_relevance(pyr, 14, q, {}, ref);
  EXPECT_EQ(a.score, b.score);
  EXPECT_EQ(a.information, b.information);
  EXPECT_EQ(a.saliency, b.saliency);
}

}  // namespace
}  // namespace fovea
