#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/extract.hpp"
#include "fovea/tokenize.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

Tokenization run(const ImageU8& img, int budget, DType dtype = DType::f32, int P = 16, int threads = 2,
                 Query q = {}) {
  Executor exec({.threads = threads});
  TokenizeParams p;
  p.patch_px = P;
  p.alloc.budget_tokens = budget;
  p.extract.dtype = dtype;
  return tokenize(img.clone(), q, p, exec);
}

TEST(Extract, LevelZeroPatchesAreTheRawPixels) {
  const ImageU8 img = test::random_image(100, 70, 3, 9);
  const Tokenization t = run(img, 100000, DType::u8);
  ASSERT_EQ(t.batch.size(), 7 * 5);
  const uint8_t* p = t.batch.patches.data<uint8_t>();
  for (int64_t i = 0; i < t.batch.size(); ++i) {
    const auto& b = t.batch.boxes[i];
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 16; ++y)
        for (int x = 0; x < 16; ++x) {
          const int ix = std::min(99, int(b[0]) + x), iy = std::min(69, int(b[1]) + y);  // edge clamp
          ASSERT_EQ(p[((i * 3 + c) * 16 + y) * 16 + x], img.at(c, iy, ix));
        }
  }
}

TEST(Extract, FloatPatchesAreClipNormalised) {
  const ImageU8 img = test::random_image(64, 32, 3, 2);
  const Tokenization t = run(img, 100000, DType::f32);
  const Normalization n;
  const float* p = t.batch.patches.data<float>();
  for (int c = 0; c < 3; ++c) {
    const float want = (img.at(c, 0, 0) / 255.0f - n.mean[c]) / n.std[c];
    EXPECT_NEAR(p[(c * 16 + 0) * 16 + 0], want, 1e-5f);
  }
}

TEST(Extract, CoarseTokensSampleTheirMipLevel) {
  const ImageU8 img = test::random_image(256, 256, 3, 4);
  const Tokenization t = run(img, 1, DType::u8);  // one token: level 4 covers 256 px
  ASSERT_EQ(t.batch.size(), 1);
  EXPECT_EQ(t.batch.levels.data<int32_t>()[0], 4);
  const ImageU8& mip = t.pyramid.level(4);
  ASSERT_EQ(mip.width(), 16);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 16; ++y)
      for (int x = 0; x < 16; ++x) ASSERT_EQ(t.batch.patches.data<uint8_t>()[(c * 16 + y) * 16 + x], mip.at(c, y, x));
  const float* pos = t.batch.positions.data<float>();
  EXPECT_FLOAT_EQ(pos[0], 128);
  EXPECT_FLOAT_EQ(pos[1], 128);
  EXPECT_FLOAT_EQ(pos[2], 256);
  EXPECT_FLOAT_EQ(pos[3], 4);
}

TEST(Extract, PositionsMatchBoxesAndLevels) {
  const ImageU8 img = test::gradient_image(300, 200, 3);
  Query q;
  q.fixations.push_back({50, 50});
  const Tokenization t = run(img, 60, DType::f32, 16, 2, q);
  const float* pos = t.batch.positions.data<float>();
  for (int64_t i = 0; i < t.batch.size(); ++i) {
    const auto& b = t.batch.boxes[i];
    const int l = t.batch.levels.data<int32_t>()[i];
    EXPECT_FLOAT_EQ(pos[i * 4 + 0], 0.5f * (b[0] + b[2]));
    EXPECT_FLOAT_EQ(pos[i * 4 + 1], 0.5f * (b[1] + b[3]));
    EXPECT_FLOAT_EQ(pos[i * 4 + 2], float(16 << l));
    EXPECT_FLOAT_EQ(pos[i * 4 + 3], float(l));
  }
}

TEST(Reconstruct, FullLevelZeroBudgetGivesTheImageBack) {
  for (const auto& [w, h, P] : {std::tuple{64, 48, 16}, std::tuple{37, 5, 16}, std::tuple{1, 1, 16},
                                std::tuple{99, 101, 14}}) {
    const ImageU8 img = test::random_image(w, h, 3, w + h);
    for (DType dt : {DType::u8, DType::f32, DType::f16}) {
      const Tokenization t = run(img, 1 << 20, dt, P);
      Executor exec({.threads = 2});
      const ImageU8 seen = reconstruct(t.batch, w, h, exec);
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            ASSERT_EQ(seen.at(c, y, x), img.at(c, y, x))
                << w << "x" << h << " dtype " << dtype_name(dt) << " at " << x << "," << y;
    }
  }
}

TEST(Reconstruct, GrayImagesAreReplicated) {
  const ImageU8 img = test::random_image(32, 32, 1, 3);
  const Tokenization t = run(img, 100, DType::u8);
  Executor exec;
  const ImageU8 seen = reconstruct(t.batch, 32, 32, exec);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(seen.at(c, 5, 7), img.at(0, 5, 7));
}

TEST(Reconstruct, ConstantImageStaysConstantAtAnyBudget) {
  const ImageU8 img = test::constant_image(333, 222, 3, 77);
  for (int budget : {6, 20, 273}) {  // 6: the coarsest tiling, 3x2 tokens of 128 px
    const Tokenization t = run(img, budget, DType::f16);
    Executor exec;
    const ImageU8 seen = reconstruct(t.batch, 333, 222, exec);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 222; y += 7)
        for (int x = 0; x < 333; x += 5) ASSERT_EQ(seen.at(c, y, x), 77);
  }
}

TEST(Uniform, BaselineGridAndPositions) {
  const ImageU8 img = test::gradient_image(1024, 512, 3);
  Executor exec;
  TokenizeParams p;
  p.uniform = true;
  p.alloc.budget_tokens = 273;
  const Tokenization t = tokenize(img.clone(), {}, p, exec);
  ASSERT_TRUE(t.is_uniform());
  EXPECT_LE(t.batch.size(), 273);
  EXPECT_EQ(t.batch.size(), t.uniform->tokens());
  EXPECT_NEAR(t.uniform->grid_x, 2 * t.uniform->grid_y, 2);
  // Boxes tile the image.
  double area = 0;
  for (const auto& b : t.batch.boxes) area += double(b[2] - b[0]) * (b[3] - b[1]);
  EXPECT_NEAR(area, 1024.0 * 512, 1.0);
  const ImageU8 seen = reconstruct(t.batch, 1024, 512, exec);
  // A smooth gradient survives downscaling well.
  double err = 0;
  for (int y = 0; y < 512; y += 3)
    for (int x = 0; x < 1024; x += 3) err += std::abs(int(seen.at(0, y, x)) - int(img.at(0, y, x)));
  EXPECT_LT(err / (171 * 342), 25.0);
}

TEST(Tokenize, SameResultForAnyThreadCountAndKernels) {
  const ImageU8 img = test::random_image(500, 300, 3, 11);
  Query q;
  q.fixations.push_back({400, 100});
  const Tokenization a = run(img, 200, DType::f32, 16, 1, q);
  const Tokenization b = run(img, 200, DType::f32, 16, 3, q);
  Executor ref({.threads = 2, .kernels = Kernels::reference});
  TokenizeParams p;
  p.alloc.budget_tokens = 200;
  const Tokenization c = tokenize(img.clone(), q, p, ref);
  ASSERT_EQ(a.batch.patches.size_bytes(), b.batch.patches.size_bytes());
  EXPECT_EQ(0, std::memcmp(a.batch.patches.bytes(), b.batch.patches.bytes(), a.batch.patches.size_bytes()));
  EXPECT_EQ(0, std::memcmp(a.batch.patches.bytes(), c.batch.patches.bytes(), a.batch.patches.size_bytes()));
  EXPECT_EQ(a.relevance.score, b.relevance.score);
  EXPECT_EQ(a.allocation.layout.tokens, c.allocation.layout.tokens);
}

TEST(Tokenize, BadParametersAreErrors) {
  const ImageU8 img = test::random_image(64, 64, 3);
  Executor exec;
  TokenizeParams p;
  p.alloc.budget_tokens = 0;
  EXPECT_THROW(tokenize(img.clone(), {}, p, exec), Error);
  p.alloc.budget_tokens = 10;
  p.patch_px = 1;
  EXPECT_THROW(tokenize(img.clone(), {}, p, exec), Error);
  p.patch_px = 16;
  p.extract.dtype = DType::i32;
  EXPECT_THROW(tokenize(img.clone(), {}, p, exec), Error);
}

// The CPU's stages, recording what the pipeline asks of them.
struct RecordingStages : TokenizeStages {
  std::vector<std::string> calls;
  const uint8_t* built = nullptr;  // level 0 of the pyramid build_pyramid returned
  int drop_levels = 0;             // > 0: break the contract, return fewer levels

  PyramidU8 build_pyramid(ImageU8 image, const PyramidParams& params, Executor& exec) override {
    calls.push_back("build_pyramid " + std::to_string(params.max_levels));
    PyramidParams fewer = params;
    fewer.max_levels = std::max(1, params.max_levels - drop_levels);
    PyramidU8 p = TokenizeStages::build_pyramid(std::move(image), fewer, exec);
    built = p.level(0).plane(0);
    return p;
  }
  TokenBatch extract(const PyramidU8& pyramid, const Allocation& allocation, const ExtractParams& params,
                     Executor& exec) override {
    calls.push_back(pyramid.level(0).plane(0) == built ? "extract from it" : "extract from another pyramid");
    return TokenizeStages::extract(pyramid, allocation, params, exec);
  }
};

// tokenize() is the one place that checks and sequences, whatever the stages: bad parameters
// fail before any stage runs (a device would have uploaded the image), then build_pyramid
// once and extract once from that pyramid (none in uniform mode), and the result is the
// plain CPU tokenize's.
TEST(Tokenize, StagesRunOnceInOrderAfterTheChecks) {
  const ImageU8 img = test::random_image(200, 120, 3, 4);
  Executor exec({.threads = 1});
  Query q;
  q.fixations.push_back({50, 60});
  TokenizeParams p;
  p.alloc.budget_tokens = 40;
  auto message = [&](const TokenizeParams& bad) {
    RecordingStages stages;
    try {
      (void)tokenize(img.clone(), q, bad, exec, stages);
    } catch (const Error& e) {
      EXPECT_TRUE(stages.calls.empty()) << e.what();
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TokenizeParams bad = p;
  bad.alloc.budget_tokens = 0;
  EXPECT_EQ(message(bad), "budget must be at least 1 token, got 0");
  bad = p;
  bad.extract.dtype = DType::i32;
  EXPECT_EQ(message(bad), "patch dtype must be f32, f16 or u8, got I32");
  bad = p;
  bad.extract.norm.std[1] = 0;
  const std::string norm_message = "normalisation std must be > 0 and mean/std finite (and mean/std, "
                                   "1/(255 std) representable as floats)";
  EXPECT_EQ(message(bad), norm_message);
  bad.extract.norm.std[1] = 1e-45f;  // > 0 and finite, but 1/std is inf: the patches would be
  EXPECT_EQ(message(bad), norm_message);

  RecordingStages stages;
  const Tokenization got = tokenize(img.clone(), q, p, exec, stages);
  const Tokenization want = tokenize(img.clone(), q, p, exec);
  ASSERT_EQ(stages.calls.size(), 2u);
  EXPECT_EQ(stages.calls[0], "build_pyramid " + std::to_string(want.pyramid.num_levels()));
  EXPECT_EQ(stages.calls[1], "extract from it");
  ASSERT_EQ(got.batch.patches.size_bytes(), want.batch.patches.size_bytes());
  EXPECT_EQ(0, std::memcmp(got.batch.patches.bytes(), want.batch.patches.bytes(), want.batch.patches.size_bytes()));
  EXPECT_EQ(got.allocation.layout.tokens, want.allocation.layout.tokens);

  p.uniform = true;
  RecordingStages uniform;
  const Tokenization u = tokenize(img.clone(), q, p, exec, uniform);
  EXPECT_EQ(uniform.calls, std::vector<std::string>{"build_pyramid " + std::to_string(u.pyramid.num_levels())});
  EXPECT_TRUE(u.is_uniform());
}

TEST(Tokenize, APyramidStageMissingLevelsIsAnError) {
  const ImageU8 img = test::random_image(200, 120, 3, 4);
  Executor exec({.threads = 1});
  TokenizeParams p;
  p.alloc.budget_tokens = 40;
  RecordingStages stages;
  stages.drop_levels = 1;
  try {
    (void)tokenize(img.clone(), {}, p, exec, stages);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::internal);
    EXPECT_NE(std::string(e.what()).find("the pyramid stage returned"), std::string::npos) << e.what();
  }
  EXPECT_EQ(stages.calls.size(), 1u);  // extract never ran
}

}  // namespace
}  // namespace fovea

namespace fovea {
namespace {

TEST(ResizeArea, IntegerFactorsAreExactBoxMeans) {
  // Random pixels, and two-valued ones (0/255 and 127/128) whose box sums land on exact ties.
  Executor exec;
  const int factors[][2] = {{4, 2}, {3, 5}, {7, 7}, {16, 16}, {1, 9}};
  for (int pattern = 0; pattern < 3; ++pattern)
    for (const auto& f : factors) {
      const int kx = f[0], ky = f[1], w = 5 * kx, h = 4 * ky;
      ImageU8 img = test::random_image(w, h, 3, 21 + kx);
      if (pattern > 0)
        for (int c = 0; c < 3; ++c)
          for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x)
              img.at(c, y, x) = ((x + y) % 2) ? (pattern == 1 ? 255 : 128) : (pattern == 1 ? 0 : 127);
      const ImageU8 r = resize_area(img, 5, 4, exec);
      const int area = kx * ky;
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 4; ++y)
          for (int x = 0; x < 5; ++x) {
            int sum = 0;
            for (int dy = 0; dy < ky; ++dy)
              for (int dx = 0; dx < kx; ++dx) sum += img.at(c, ky * y + dy, kx * x + dx);
            ASSERT_EQ(r.at(c, y, x), (2 * sum + area) / (2 * area)) << kx << "x" << ky << " p" << pattern;
          }
    }
}

TEST(ResizeArea, FractionalFactorsAverageTheCoveredArea) {
  const ImageU8 flat = test::constant_image(100, 70, 3, 123);
  Executor exec;
  const ImageU8 r = resize_area(flat, 33, 29, exec);
  for (int y = 0; y < 29; ++y)
    for (int x = 0; x < 33; ++x) ASSERT_EQ(r.at(1, y, x), 123);
  // Mean preserved (within rounding) on a random image.
  const ImageU8 img = test::random_image(90, 60, 1, 4);
  const ImageU8 s = resize_area(img, 37, 23, exec);
  double a = 0, b = 0;
  for (int y = 0; y < 60; ++y)
    for (int x = 0; x < 90; ++x) a += img.at(0, y, x);
  for (int y = 0; y < 23; ++y)
    for (int x = 0; x < 37; ++x) b += s.at(0, y, x);
  EXPECT_NEAR(a / (90 * 60), b / (37 * 23), 1.0);
  EXPECT_THROW(resize_area(img, 0, 5, exec), Error);
}

}  // namespace
}  // namespace fovea
