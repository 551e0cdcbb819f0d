// Mip pyramid: invariants (constant, mean, nesting), the exact box semantics, extents, and
// that every SIMD target, every thread count and the fused schedule give the reference's
// bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/pyramid.hpp"
#include "hwy/targets.h"
#include "pyramid/downsample.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using test::random_image;

// Floats over a wide range of magnitudes and both signs, so that any change in the order of
// the adds changes some bits (values in [0, 1) alone would hide most reorderings).
ImageF32 wide_range_f32(int w, int h, int channels, uint32_t seed) {
  ImageF32 img(w, h, channels);
  uint32_t s = seed * 2654435761u + 99u;
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    return s;
  };
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const float mantissa = (next() >> 8) * (1.0f / 16777216.0f);
        const int exponent = static_cast<int>(next() % 41) - 20;
        const float sign = (next() & 1) ? -1.0f : 1.0f;
        img.at(c, y, x) = sign * std::ldexp(mantissa, exponent);
      }
  return img;
}

// Bitwise equality of the valid samples (never the row padding).
template <typename T>
::testing::AssertionResult same_image(const Image<T>& a, const Image<T>& b) {
  if (a.width() != b.width() || a.height() != b.height() || a.channels() != b.channels())
    return ::testing::AssertionFailure()
           << "extents " << a.width() << "x" << a.height() << "x" << a.channels() << " vs "
           << b.width() << "x" << b.height() << "x" << b.channels();
  for (int c = 0; c < a.channels(); ++c)
    for (int y = 0; y < a.height(); ++y)
      for (int x = 0; x < a.width(); ++x)
        if (std::memcmp(&a.row(c, y)[x], &b.row(c, y)[x], sizeof(T)) != 0)
          return ::testing::AssertionFailure()
                 << "sample (c=" << c << ", x=" << x << ", y=" << y << ") of " << a.width()
                 << "x" << a.height() << ": " << +a.at(c, y, x) << " vs " << +b.at(c, y, x);
  return ::testing::AssertionSuccess();
}

template <typename T>
::testing::AssertionResult same_pyramid(const Pyramid<T>& a, const Pyramid<T>& b) {
  if (a.num_levels() != b.num_levels())
    return ::testing::AssertionFailure() << a.num_levels() << " vs " << b.num_levels() << " levels";
  for (int l = 0; l < a.num_levels(); ++l) {
    auto r = same_image(a.level(l), b.level(l));
    if (!r) return r << " at level " << l;
  }
  return ::testing::AssertionSuccess();
}

// The box semantics written out per output sample, straight from pyramid.hpp.
uint8_t naive_sample(const ImageU8& s, int c, int x, int y) {
  if (s.width() >= 2 && s.height() >= 2)
    return static_cast<uint8_t>((s.at(c, 2 * y, 2 * x) + s.at(c, 2 * y, 2 * x + 1) +
                                 s.at(c, 2 * y + 1, 2 * x) + s.at(c, 2 * y + 1, 2 * x + 1) + 2) /
                                4);
  if (s.width() >= 2) return static_cast<uint8_t>((s.at(c, 0, 2 * x) + s.at(c, 0, 2 * x + 1) + 1) / 2);
  if (s.height() >= 2) return static_cast<uint8_t>((s.at(c, 2 * y, 0) + s.at(c, 2 * y + 1, 0) + 1) / 2);
  return s.at(c, 0, 0);
}
float naive_sample(const ImageF32& s, int c, int x, int y) {
  if (s.width() >= 2 && s.height() >= 2) {
    const float a = s.at(c, 2 * y, 2 * x), b = s.at(c, 2 * y, 2 * x + 1);
    const float cc = s.at(c, 2 * y + 1, 2 * x), d = s.at(c, 2 * y + 1, 2 * x + 1);
    return ((a + cc) + (b + d)) * 0.25f;  // the documented order: columns first
  }
  if (s.width() >= 2) return (s.at(c, 0, 2 * x) + s.at(c, 0, 2 * x + 1)) * 0.5f;
  if (s.height() >= 2) return (s.at(c, 2 * y, 0) + s.at(c, 2 * y + 1, 0)) * 0.5f;
  return s.at(c, 0, 0);
}
template <typename T>
Image<T> naive_level(const Image<T>& src) {
  Image<T> dst(std::max(1, src.width() / 2), std::max(1, src.height() / 2), src.channels());
  for (int c = 0; c < dst.channels(); ++c)
    for (int y = 0; y < dst.height(); ++y)
      for (int x = 0; x < dst.width(); ++x) dst.at(c, y, x) = naive_sample(src, c, x, y);
  return dst;
}

int expected_levels(int w, int h) {
  int levels = 1;
  while (w > 1 || h > 1) {
    w = std::max(1, w / 2);
    h = std::max(1, h / 2);
    ++levels;
  }
  return levels;
}

// Selects one Highway target for the kernels' dynamic dispatch; restores the real CPU's set.
class ScopedTarget {
 public:
  explicit ScopedTarget(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~ScopedTarget() { hwy::SetSupportedTargetsForTest(0); }
};

std::vector<int64_t> kernel_targets() {
  std::vector<int64_t> out;
  const int64_t mask = hwy::SupportedTargets() & pyramid_detail::simd_compiled_targets();
  for (int64_t t = mask; t != 0; t &= t - 1) out.push_back(t & -t);
  return out;
}

const std::vector<std::pair<int, int>> kOddSizes = {
    {1, 1}, {1, 7}, {9, 1}, {2, 1}, {1, 2}, {3, 3}, {37, 5}, {5, 37}, {1000, 3}, {3, 1000}, {64, 64}, {65, 63}, {130, 17}};

TEST(Pyramid, FullMipLevels) {
  EXPECT_EQ(full_mip_levels(1, 1), 1);
  EXPECT_EQ(full_mip_levels(2, 1), 2);
  EXPECT_EQ(full_mip_levels(1, 3), 2);
  EXPECT_EQ(full_mip_levels(4096, 4096), 13);
  EXPECT_EQ(full_mip_levels(4097, 1), 13);
  EXPECT_EQ(full_mip_levels(37, 5), 6);
  EXPECT_EQ(full_mip_levels(1000, 3), 10);
  EXPECT_THROW(full_mip_levels(0, 4), Error);
  EXPECT_EQ(mip_extent(37, 1), 18);
  EXPECT_EQ(mip_extent(5, 3), 1);
  EXPECT_EQ(mip_extent(5, 40), 1);
}

TEST(Pyramid, ExtentsOddTinyAndNonSquare) {
  Executor exec({.threads = 2});
  for (auto [w, h] : kOddSizes)
    for (int channels : {1, 3}) {
      SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(channels));
      PyramidU8 p = build_pyramid(random_image(w, h, channels), {}, exec);
      ASSERT_EQ(p.num_levels(), full_mip_levels(w, h));
      ASSERT_EQ(p.num_levels(), expected_levels(w, h));
      int ew = w, eh = h;
      for (int l = 0; l < p.num_levels(); ++l) {
        EXPECT_EQ(p.level(l).width(), ew) << "level " << l;
        EXPECT_EQ(p.level(l).height(), eh) << "level " << l;
        EXPECT_EQ(p.level(l).channels(), channels);
        ew = std::max(1, ew >> 1);
        eh = std::max(1, eh >> 1);
      }
      EXPECT_EQ(p.level(p.num_levels() - 1).width(), 1);
      EXPECT_EQ(p.level(p.num_levels() - 1).height(), 1);
    }
  // Spelled out: 37x5 -> 18x2 -> 9x1 -> 4x1 -> 2x1 -> 1x1.
  PyramidU8 p = build_pyramid(random_image(37, 5, 1), {}, exec);
  const int widths[] = {37, 18, 9, 4, 2, 1}, heights[] = {5, 2, 1, 1, 1, 1};
  ASSERT_EQ(p.num_levels(), 6);
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(p.level(l).width(), widths[l]);
    EXPECT_EQ(p.level(l).height(), heights[l]);
  }
}

TEST(Pyramid, ConstantStaysConstant) {
  for (Kernels kernels : {Kernels::best, Kernels::reference}) {
    Executor exec({.threads = 2, .kernels = kernels});
    for (auto [w, h] : {std::pair{67, 45}, std::pair{1, 9}, std::pair{200, 1}, std::pair{256, 128}}) {
      for (int v : {0, 1, 127, 128, 254, 255}) {
        PyramidU8 p = build_pyramid(test::constant_image(w, h, 3, static_cast<uint8_t>(v)), {}, exec);
        for (int l = 0; l < p.num_levels(); ++l)
          for (int c = 0; c < 3; ++c)
            for (int y = 0; y < p.level(l).height(); ++y)
              for (int x = 0; x < p.level(l).width(); ++x)
                ASSERT_EQ(p.level(l).at(c, y, x), v) << w << "x" << h << " level " << l;
      }
      // Doubling, adding two equal values and scaling by 0.25 are exact: the value survives.
      for (float v : {0.0f, 1.0f, 0.5f, 0.123f, 1e-3f, 0.999f}) {
        ImageF32 img(w, h, 3);
        for (int c = 0; c < 3; ++c)
          for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) img.at(c, y, x) = v;
        PyramidF32 p = build_pyramid(std::move(img), {}, exec);
        for (int l = 0; l < p.num_levels(); ++l)
          for (int c = 0; c < 3; ++c)
            for (int y = 0; y < p.level(l).height(); ++y)
              for (int x = 0; x < p.level(l).width(); ++x)
                ASSERT_EQ(p.level(l).at(c, y, x), v) << w << "x" << h << " level " << l;
      }
    }
  }
}

template <typename T>
double mean(const Image<T>& img) {
  double sum = 0;
  for (int c = 0; c < img.channels(); ++c)
    for (int y = 0; y < img.height(); ++y)
      for (int x = 0; x < img.width(); ++x) sum += img.at(c, y, x);
  return sum / (double(img.pixels()) * img.channels());
}

// Power-of-two extents, so every level covers the whole image.
// float: each level's mean equals level 0's up to float rounding (relative 1e-5).
// uint8: one step maps a 2×2 sum s to floor((s + 2) / 4) = s/4 + e with e in
// {0, -1/4, +1/2, +1/4} for s mod 4 = 0, 1, 2, 3 (and floor((s + 1) / 2) = s/2 + {0, +1/2} for
// 1×2 boxes), so the mean moves by at most -1/4 .. +1/2 per level: after l levels it lies in
// [mean0 - l/4, mean0 + l/2]. Random data sit near +1/8 per level; the bound is what is sure.
TEST(Pyramid, MeanPreserved) {
  Executor exec({.threads = 2});
  for (auto [w, h] : {std::pair{64, 32}, std::pair{256, 256}, std::pair{128, 1}, std::pair{1, 64}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    PyramidU8 p = build_pyramid(random_image(w, h, 3, 7), {}, exec);
    const double m0 = mean(p.level(0));
    for (int l = 1; l < p.num_levels(); ++l) {
      const double d = mean(p.level(l)) - m0;
      EXPECT_GE(d, -0.25 * l) << "level " << l;
      EXPECT_LE(d, 0.5 * l) << "level " << l;
    }
    PyramidF32 pf = build_pyramid(test::random_image_f32(w, h, 3, 7), {}, exec);
    const double mf0 = mean(pf.level(0));
    for (int l = 1; l < pf.num_levels(); ++l)
      EXPECT_NEAR(mean(pf.level(l)), mf0, 1e-5 * mf0) << "level " << l;
  }
}

TEST(Pyramid, BoxSemanticsMatchNaiveFormula) {
  for (Kernels kernels : {Kernels::best, Kernels::reference}) {
    Executor exec({.threads = 3, .kernels = kernels});
    for (auto [w, h] : kOddSizes) {
      SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
      PyramidU8 p = build_pyramid(random_image(w, h, 3, w * 31 + h), {}, exec);
      for (int l = 1; l < p.num_levels(); ++l)
        ASSERT_TRUE(same_image(p.level(l), naive_level(p.level(l - 1)))) << "level " << l;
      PyramidF32 pf = build_pyramid(wide_range_f32(w, h, 3, w * 17 + h), {}, exec);
      for (int l = 1; l < pf.num_levels(); ++l)
        ASSERT_TRUE(same_image(pf.level(l), naive_level(pf.level(l - 1)))) << "level " << l;
    }
  }
  // A hand-checked case: 2x2 -> 1x1 rounds half up.
  Executor exec({.threads = 1});
  ImageU8 img(2, 2, 1);
  img.at(0, 0, 0) = 1, img.at(0, 0, 1) = 2, img.at(0, 1, 0) = 2, img.at(0, 1, 1) = 1;  // 6/4 = 1.5
  EXPECT_EQ(build_pyramid(std::move(img), {}, exec).level(1).at(0, 0, 0), 2);
}

// Mip sample (x, y) of level l is the mean of the level-0 block it covers, for every level
// whose extents did not bottom out at 1 (where boxes become 1×2 and the nesting is by rows
// or columns only). Level-0 columns/rows beyond the last full block are ignored.
TEST(Pyramid, LevelsNestExactly) {
  Executor exec({.threads = 2});
  for (auto [w, h] : {std::pair{53, 41}, std::pair{64, 64}, std::pair{100, 7}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    PyramidF32 p = build_pyramid(test::random_image_f32(w, h, 3, 3), {}, exec);
    const ImageF32& base = p.level(0);
    for (int l = 1; l < p.num_levels() && (w >> l) >= 1 && (h >> l) >= 1; ++l) {
      const int block = 1 << l;
      const ImageF32& m = p.level(l);
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < m.height(); ++y)
          for (int x = 0; x < m.width(); ++x) {
            double sum = 0;
            for (int yy = y * block; yy < (y + 1) * block; ++yy)
              for (int xx = x * block; xx < (x + 1) * block; ++xx) sum += base.at(c, yy, xx);
            ASSERT_NEAR(m.at(c, y, x), sum / (block * block), 1e-6)
                << "level " << l << " (" << x << ", " << y << ")";
          }
    }
  }
}

// Every compiled Highway target the CPU supports, bit for bit against the reference.
TEST(Pyramid, SimdMatchesReferenceOnEveryTarget) {
  const std::vector<int64_t> targets = kernel_targets();
  ASSERT_FALSE(targets.empty());
  std::string names;
  for (int64_t t : targets) names += std::string(names.empty() ? "" : " ") + hwy::TargetName(t);
  std::printf("Highway targets under test: %s\n", names.c_str());
  Executor ref_exec({.threads = 1, .kernels = Kernels::reference});
  Executor exec({.threads = 1});
  for (int64_t target : targets) {
    ScopedTarget scoped(target);
    SCOPED_TRACE(hwy::TargetName(target));
    // Whole pyramids: widths 1..130 hit every vector tail (full, 128-bit, scalar).
    for (int h : {1, 2, 3, 6})
      for (int w = 1; w <= 130; ++w) {
        SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
        const uint32_t seed = w * 7 + h;
        ASSERT_TRUE(same_pyramid(build_pyramid(random_image(w, h, 1, seed), {}, exec),
                                 build_pyramid(random_image(w, h, 1, seed), {}, ref_exec)));
        ASSERT_TRUE(same_pyramid(build_pyramid(wide_range_f32(w, h, 1, seed), {}, exec),
                                 build_pyramid(wide_range_f32(w, h, 1, seed), {}, ref_exec)));
      }
    ASSERT_TRUE(same_pyramid(build_pyramid(random_image(517, 301, 3, 5), {}, exec),
                             build_pyramid(random_image(517, 301, 3, 5), {}, ref_exec)));
    ASSERT_TRUE(same_pyramid(build_pyramid(wide_range_f32(517, 301, 3, 5), {}, exec),
                             build_pyramid(wide_range_f32(517, 301, 3, 5), {}, ref_exec)));

    // The row kernels on their own, from unaligned addresses, on sources of exactly 2·dst_w
    // samples (AddressSanitizer builds catch any over-read), never writing past dst_w.
    const ImageU8 u = random_image(2 * 200 + 8, 2, 1, 11);
    const ImageF32 f = wide_range_f32(2 * 200 + 8, 2, 1, 11);
    for (int offset = 0; offset < 4; ++offset)
      for (int n = 0; n <= 200; ++n) {
        SCOPED_TRACE("offset " + std::to_string(offset) + " dst_w " + std::to_string(n));
        const std::vector<uint8_t> top_buf(u.row(0, 0), u.row(0, 0) + offset + 2 * n);
        const uint8_t* top = top_buf.data() + offset;
        const std::vector<uint8_t> bottom_buf(u.row(0, 1), u.row(0, 1) + offset + 2 * n);
        const uint8_t* bottom = bottom_buf.data() + offset;
        std::vector<uint8_t> a(n + 1, 0xAB), b(n + 1, 0xAB);
        pyramid_detail::box2x2_simd(top, bottom, a.data(), n);
        pyramid_detail::box2x2_ref(top, bottom, b.data(), n);
        ASSERT_EQ(a, b);
        ASSERT_EQ(a[n], 0xAB);
        pyramid_detail::box2x1_simd(top, a.data(), n);
        pyramid_detail::box2x1_ref(top, b.data(), n);
        ASSERT_EQ(a, b);
        ASSERT_EQ(a[n], 0xAB);
        const std::vector<float> ftop_buf(f.row(0, 0), f.row(0, 0) + offset + 2 * n);
        const float* ftop = ftop_buf.data() + offset;
        const std::vector<float> fbottom_buf(f.row(0, 1), f.row(0, 1) + offset + 2 * n);
        const float* fbottom = fbottom_buf.data() + offset;
        std::vector<float> fa(n + 1, -7.0f), fb(n + 1, -7.0f);
        pyramid_detail::box2x2_simd(ftop, fbottom, fa.data(), n);
        pyramid_detail::box2x2_ref(ftop, fbottom, fb.data(), n);
        ASSERT_EQ(0, std::memcmp(fa.data(), fb.data(), sizeof(float) * (n + 1)));
        ASSERT_EQ(fa[n], -7.0f);
        pyramid_detail::box2x1_simd(ftop, fa.data(), n);
        pyramid_detail::box2x1_ref(ftop, fb.data(), n);
        ASSERT_EQ(0, std::memcmp(fa.data(), fb.data(), sizeof(float) * (n + 1)));
        ASSERT_EQ(fa[n], -7.0f);
      }
  }
}

// Thread counts, and the fused strip schedule against one level at a time (downsample_2x2).
TEST(Pyramid, IdenticalForEveryThreadCountAndSchedule) {
  for (auto [w, h] : {std::pair{1031, 517}, std::pair{700, 3}, std::pair{5, 900}, std::pair{2048, 130}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    Executor one({.threads = 1});
    const PyramidU8 ref = build_pyramid(random_image(w, h, 3, 21), {}, one);
    const PyramidF32 ref_f = build_pyramid(wide_range_f32(w, h, 3, 21), {}, one);
    for (int threads : {2, 3, 7}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      Executor exec({.threads = threads});
      ASSERT_TRUE(same_pyramid(build_pyramid(random_image(w, h, 3, 21), {}, exec), ref));
      ASSERT_TRUE(same_pyramid(build_pyramid(wide_range_f32(w, h, 3, 21), {}, exec), ref_f));
      // Level by level with downsample_2x2 (no fusion).
      ImageU8 prev = random_image(w, h, 3, 21);
      for (int l = 1; l < ref.num_levels(); ++l) {
        ImageU8 next(mip_extent(w, l), mip_extent(h, l), 3);
        downsample_2x2(prev, next, exec);
        ASSERT_TRUE(same_image(next, ref.level(l))) << "level " << l;
        prev = std::move(next);
      }
    }
  }
}

TEST(Pyramid, MaxLevelsHonoured) {
  Executor exec({.threads = 2});
  const int full = full_mip_levels(300, 200);  // 9
  for (int max_levels : {0, 1, 2, 3, 5, full - 1, full, full + 1, 100}) {
    PyramidU8 p = build_pyramid(random_image(300, 200, 3), {.max_levels = max_levels}, exec);
    const int want = (max_levels == 0 || max_levels > full) ? full : max_levels;
    EXPECT_EQ(p.num_levels(), want) << "max_levels " << max_levels;
    EXPECT_EQ(p.level(p.num_levels() - 1).width(), mip_extent(300, want - 1));
    PyramidF32 pf = build_pyramid(test::random_image_f32(300, 200, 1), {.max_levels = max_levels}, exec);
    EXPECT_EQ(pf.num_levels(), want);
  }
  // A truncated chain is a prefix of the full one.
  const PyramidU8 all = build_pyramid(random_image(300, 200, 3, 4), {}, exec);
  const PyramidU8 some = build_pyramid(random_image(300, 200, 3, 4), {.max_levels = 4}, exec);
  for (int l = 0; l < 4; ++l) EXPECT_TRUE(same_image(some.level(l), all.level(l)));
  EXPECT_THROW(build_pyramid(random_image(8, 8, 1), {.max_levels = -1}, exec), Error);
}

TEST(Pyramid, BadArgumentsAreErrors) {
  Executor exec({.threads = 1});
  EXPECT_THROW(build_pyramid(ImageU8(), {}, exec), Error);
  ImageU8 src = random_image(9, 6, 3);
  ImageU8 wrong(5, 3, 3), wrong_channels(4, 3, 1);
  try {
    downsample_2x2(src, wrong, exec);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_STREQ(e.what(), "downsample_2x2: destination is 5x3x3, a 9x6x3 source needs 4x3x3");
  }
  EXPECT_THROW(downsample_2x2(src, wrong_channels, exec), Error);
  ImageU8 right(4, 3, 3);
  downsample_2x2(src, right, exec);
  EXPECT_TRUE(same_image(right, naive_level(src)));
}

}  // namespace
}  // namespace fovea
