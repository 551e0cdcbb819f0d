// Views (fovea/view.hpp): the pipeline reads a caller's interleaved or planar pixels in place and
// gives exactly what it gives for an owned Image of the same pixels; the interleaved first
// reduction matches the reference on every Highway target; bad views are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/view.hpp"
#include "fovea/viz.hpp"
#include "hwy/targets.h"
#include "pyramid/downsample.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using test::random_image;

// The planar image's pixels as HWC with `pixel_stride` samples per pixel and `pad` extra samples
// per row (what numpy crops and RGBA[..., :3] look like).
std::vector<uint8_t> to_hwc(const ImageU8& img, int pixel_stride, int pad) {
  const int W = img.width(), H = img.height(), C = img.channels();
  const size_t row = size_t(W) * pixel_stride + pad;
  std::vector<uint8_t> out(row * H, 0xEE);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < C; ++c) out[y * row + size_t(x) * pixel_stride + c] = img.at(c, y, x);
  return out;
}

bool same_image(const ImageViewU8& a, const ImageViewU8& b) {
  if (a.width() != b.width() || a.height() != b.height() || a.channels() != b.channels()) return false;
  for (int c = 0; c < a.channels(); ++c)
    for (int y = 0; y < a.height(); ++y)
      for (int x = 0; x < a.width(); ++x)
        if (a.at(c, y, x) != b.at(c, y, x)) return false;
  return true;
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.bytes(), b.bytes(), a.size_bytes()) == 0;
}

TEST(View, PyramidFromInterleavedEqualsOwned) {
  for (bool reference : {false, true}) {
    Executor exec({.threads = 2, .kernels = reference ? Kernels::reference : Kernels::best});
    for (auto [w, h] : {std::pair{1, 1}, {1, 7}, {9, 1}, {2, 2}, {33, 17}, {130, 65}, {517, 301}, {1024, 96}}) {
      for (int ps : {3, 4}) {
        SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " pixel stride " + std::to_string(ps));
        const ImageU8 img = random_image(w, h, 3, w * 31 + h);
        const std::vector<uint8_t> hwc = to_hwc(img, ps, 5);
        const ImageViewU8 v(hwc.data(), w, h, 3, ps, ptrdiff_t(w) * ps + 5, 1);
        const PyramidU8 borrowed = build_pyramid(v, {}, exec);
        const PyramidU8 owned = build_pyramid(img.clone(), {}, exec);
        ASSERT_TRUE(borrowed.borrows_level0());
        ASSERT_EQ(borrowed.num_levels(), owned.num_levels());
        EXPECT_EQ(borrowed.view(0).data(), hwc.data());  // level 0 is the caller's buffer
        for (int l = 0; l < owned.num_levels(); ++l) ASSERT_TRUE(same_image(borrowed.view(l), owned.view(l))) << l;
        EXPECT_THROW(borrowed.level(0), Error);
      }
    }
  }
}

TEST(View, InterleavedKernelMatchesReferenceOnEveryTarget) {
  const ImageU8 img = random_image(2 * 150 + 3, 2, 3, 7);
  const std::vector<uint8_t> hwc = to_hwc(img, 3, 0);
  const size_t row = size_t(img.width()) * 3;
  const int64_t targets = hwy::SupportedTargets() & pyramid_detail::simd_compiled_targets();
  int tested = 0;
  for (int bit = 0; bit < 63; ++bit) {
    const int64_t target = int64_t(1) << bit;
    if (!(targets & target)) continue;
    ++tested;
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int n = 0; n <= 150; ++n) {
      std::vector<uint8_t> a(3 * (n + 1), 0xAB), b(3 * (n + 1), 0xAB);
      uint8_t* da[3] = {a.data(), a.data() + n + 1, a.data() + 2 * (n + 1)};
      uint8_t* db[3] = {b.data(), b.data() + n + 1, b.data() + 2 * (n + 1)};
      pyramid_detail::box2x2_interleaved_simd(hwc.data(), hwc.data() + row, 3, 3, da, n);
      pyramid_detail::box2x2_interleaved_ref(hwc.data(), hwc.data() + row, 3, 3, db, n);
      ASSERT_EQ(a, b) << n;
      EXPECT_EQ(a[n], 0xAB);  // never writes past dst_w
    }
    hwy::SetSupportedTargetsForTest(0);
  }
  EXPECT_GE(tested, 2);  // at least one SIMD target and the emulated/scalar one
}

TEST(View, TokenizeFromViewEqualsImageInEveryMode) {
  Executor exec({.threads = 2});
  for (auto [w, h, c] : {std::tuple{300, 200, 3}, {257, 131, 3}, {128, 96, 1}}) {
    const ImageU8 img = random_image(w, h, c, w + h);
    const std::vector<uint8_t> hwc = to_hwc(img, c, c == 3 ? 9 : 0);
    const ImageViewU8 v = ImageViewU8::interleaved(hwc.data(), w, h, c, ptrdiff_t(w) * c + (c == 3 ? 9 : 0));
    for (int mode = 0; mode < 4; ++mode) {
      SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(c) + " mode " + std::to_string(mode));
      TokenizeParams p;
      p.alloc.budget_tokens = mode == 3 ? 400 : 120;
      p.uniform = mode == 1;
      if (mode == 2) p.relevance.stats_level = 0;  // tile statistics read level 0 (the view)
      if (mode == 3) p.extract.dtype = DType::u8;
      Query q;
      q.fixations.push_back({w * 0.3f, h * 0.6f});
      const Tokenization a = tokenize(v, q, p, exec);
      const Tokenization b = tokenize(img.clone(), q, p, exec);
      ASSERT_TRUE(same_tensor(a.batch.patches, b.batch.patches));
      ASSERT_TRUE(same_tensor(a.batch.positions, b.batch.positions));
      ASSERT_EQ(a.relevance.score, b.relevance.score);
      ASSERT_EQ(a.allocation.rate_map.level, b.allocation.rate_map.level);
      ASSERT_EQ(serialize_tokens(a, q, p), serialize_tokens(b, q, p));
      const ImageU8 oa = render_overlay(a.pyramid.view(0), a.relevance, a.batch);
      const ImageU8 ob = render_overlay(b.pyramid.view(0), b.relevance, b.batch);
      ASSERT_TRUE(same_image(oa, ob));
    }
  }
}

TEST(View, PlanarViewAndToImage) {
  Executor exec({.threads = 1});
  const ImageU8 img = random_image(70, 45, 3, 3);
  const ImageViewU8 v = img;  // an owned image is a planar view
  EXPECT_TRUE(v.planar_rows());
  EXPECT_TRUE(same_image(to_image(v), img));
  const Tokenization a = tokenize(v, {}, {}, exec);
  const Tokenization b = tokenize(img.clone(), {}, {}, exec);
  EXPECT_TRUE(same_tensor(a.batch.patches, b.batch.patches));
}

TEST(View, BadViewsAreRefused) {
  uint8_t buf[64] = {};
  Executor exec({.threads = 1});
  EXPECT_THROW(tokenize(ImageViewU8(), {}, {}, exec), Error);
  EXPECT_THROW(ImageViewU8::interleaved(buf, 4, 4, 2).check(), Error);             // 2 channels
  EXPECT_THROW(ImageViewU8(buf, 4, 4, 3, 1, 4, 1).check(), Error);                 // channels overlap pixels
  EXPECT_THROW(ImageViewU8(buf, 4, 4, 3, 3, 6, 1).check(), Error);                 // rows overlap
  EXPECT_NO_THROW(ImageViewU8::interleaved(buf, 4, 4, 3).check());
  EXPECT_NO_THROW(ImageViewU8::planar(buf, 4, 4, 3).check());
  try {
    ImageViewU8(buf, 0, 4, 3, 3, 12, 1).check("frame");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_EQ(std::string(e.what()), "frame is empty (0x4)");
  }
}

TEST(View, TensorViewReadsInPlace) {
  Tensor t(DType::f32, {2, 3});
  const TensorView v = t;
  EXPECT_EQ(v.bytes(), t.bytes());
  EXPECT_EQ(v.numel(), 6);
  EXPECT_EQ(v.size_bytes(), 24u);
  EXPECT_THROW(v.data<uint16_t>(), Error);
}

}  // namespace
}  // namespace fovea
