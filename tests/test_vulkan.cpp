// The Vulkan backend against the CPU reference, on whatever device is present (lavapipe in
// CI), with the validation layers on: any validation message fails the test. Errors are
// reported as a normalised MSE (sum (gpu - cpu)^2 / sum cpu^2) like llama.cpp's
// test-backend-ops, plus the exact-match checks the contracts promise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/vulkan.hpp"
#include "test_util.hpp"

#ifdef FOVEA_HAVE_VULKAN
#include "vulkan/shading_rate.hpp"
#include "vulkan/vk/vk.hpp"
#endif

namespace fovea {
namespace {

using test::random_image;
using test::random_image_f32;

class Vulkan : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!vulkan_available()) return;
    try {
      gpu_ = VulkanBackend::create({.device = "", .validation = true}).release();
    } catch (const Error& e) {
      create_error_ = e.what();  // e.g. the validation layers are not installed
    }
  }
  static void TearDownTestSuite() {
    delete gpu_;
    gpu_ = nullptr;
  }
  void SetUp() override {
    if (!vulkan_built()) GTEST_SKIP() << "fovea was built without the Vulkan backend";
    if (!create_error_.empty()) FAIL() << "creating the Vulkan backend failed: " << create_error_;
    if (!gpu_) GTEST_SKIP() << "no Vulkan device on this machine";
    errors_before_ = gpu_->validation_errors();
  }
  void TearDown() override {
    if (!gpu_) return;
    EXPECT_EQ(gpu_->validation_errors(), errors_before_) << "validation messages:\n" << [] {
      std::string all;
      for (const std::string& m : gpu_->validation_messages()) all += "  " + m + "\n";
      return all;
    }();
  }
  static VulkanBackend& gpu() { return *gpu_; }

  static VulkanBackend* gpu_;
  static std::string create_error_;
  int errors_before_ = 0;
};
VulkanBackend* Vulkan::gpu_ = nullptr;
std::string Vulkan::create_error_;

template <typename T>
double nmse(const Image<T>& got, const Image<T>& want) {
  double num = 0, den = 0;
  for (int c = 0; c < want.channels(); ++c)
    for (int y = 0; y < want.height(); ++y)
      for (int x = 0; x < want.width(); ++x) {
        const double a = got.at(c, y, x), b = want.at(c, y, x);
        num += (a - b) * (a - b);
        den += b * b;
      }
  return den > 0 ? num / den : num;
}

// Largest |got - want| / max(|want|, floor) over every sample; infinity if one is NaN.
template <typename T>
double max_error(const Image<T>& got, const Image<T>& want, double floor = 1.0) {
  double m = 0;
  for (int c = 0; c < want.channels(); ++c)
    for (int y = 0; y < want.height(); ++y)
      for (int x = 0; x < want.width(); ++x) {
        const double a = got.at(c, y, x), b = want.at(c, y, x);
        const double e = std::abs(a - b) / std::max(std::abs(b), floor);
        if (std::isnan(e)) return std::numeric_limits<double>::infinity();
        m = std::max(m, e);
      }
  return m;
}

template <typename T>
bool same_extents(const Image<T>& a, const Image<T>& b) {
  return a.width() == b.width() && a.height() == b.height() && a.channels() == b.channels();
}

struct Size {
  int w, h, c;
};
const Size kSizes[] = {{1, 1, 1}, {1, 7, 1}, {9, 1, 3}, {13, 5, 3}, {64, 64, 1}, {127, 33, 3}, {300, 201, 3}};

TEST_F(Vulkan, DeviceIsDescribed) {
  const VulkanDeviceInfo& d = gpu().device();
  EXPECT_FALSE(d.name.empty());
  EXPECT_GE(d.max_image_dimension_2d, 4096u);
  EXPECT_GE(d.max_image_array_layers, 256u);
  const auto all = list_vulkan_devices();
  ASSERT_FALSE(all.empty());
  bool found = false;
  for (const auto& x : all) found |= x.name == d.name;
  EXPECT_TRUE(found);
}

TEST_F(Vulkan, ComputeMipsAreBitExactU8) {
  for (const Size& s : kSizes) {
    SCOPED_TRACE(std::to_string(s.w) + "x" + std::to_string(s.h) + "x" + std::to_string(s.c));
    ImageU8 img = random_image(s.w, s.h, s.c, 7 + s.w);
    Executor exec({.threads = 1});
    const PyramidU8 want = build_pyramid(img.clone(), {}, exec);
    const PyramidU8 got = gpu().build_pyramid(img, {}, MipMethod::compute);
    ASSERT_EQ(got.num_levels(), want.num_levels());
    for (int l = 0; l < want.num_levels(); ++l) {
      ASSERT_TRUE(same_extents(got.level(l), want.level(l))) << "level " << l;
      EXPECT_EQ(max_error(got.level(l), want.level(l)), 0.0) << "level " << l;
    }
  }
}

TEST_F(Vulkan, ComputeMipsMatchFloatWithin1e5) {
  for (const Size& s : kSizes) {
    SCOPED_TRACE(std::to_string(s.w) + "x" + std::to_string(s.h) + "x" + std::to_string(s.c));
    ImageF32 img = random_image_f32(s.w, s.h, s.c, 3 + s.h);
    Executor exec({.threads = 1});
    const PyramidF32 want = build_pyramid(img.clone(), {}, exec);
    const PyramidF32 got = gpu().build_pyramid(img, {}, MipMethod::compute);
    ASSERT_EQ(got.num_levels(), want.num_levels());
    for (int l = 0; l < want.num_levels(); ++l) {
      ASSERT_TRUE(same_extents(got.level(l), want.level(l)));
      EXPECT_LE(max_error(got.level(l), want.level(l), 1e-6), 1e-5) << "level " << l;
    }
  }
}

TEST_F(Vulkan, PartialChainHonoursMaxLevels) {
  ImageU8 img = random_image(100, 60, 3, 5);
  const PyramidU8 got = gpu().build_pyramid(img, {.max_levels = 3}, MipMethod::compute);
  EXPECT_EQ(got.num_levels(), 3);
  EXPECT_EQ(got.level(2).width(), 25);
  EXPECT_EQ(got.level(2).height(), 15);
  EXPECT_THROW(gpu().build_pyramid(img, {.max_levels = -1}, MipMethod::compute), Error);
}

// Blit cases beyond kSizes: axes far from a power of two (where the driver's normalised
// coordinates would lose bits without padding), an axis reaching extent 1 while the padded
// one is still 2 (the guard texels), and 16383-wide stripes of 0/255 (the worst case for an
// inexact filter: every 2:1 step averages 0 and 255).
std::vector<std::pair<std::string, ImageU8>> blit_cases_u8() {
  std::vector<std::pair<std::string, ImageU8>> cases;
  auto add = [&](int w, int h, int c) {
    cases.emplace_back(std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(c),
                       random_image(w, h, c, 11 + w));
  };
  for (const Size& s : kSizes) add(s.w, s.h, s.c);
  add(3, 300, 1);
  add(1000, 3, 1);
  add(4097, 9, 1);
  add(8191, 5, 1);
  add(7, 16383, 1);
  ImageU8 stripes(16383, 3, 3);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < stripes.width(); ++x) stripes.at(c, y, x) = uint8_t((x + c) % 2 ? 255 : 0);
  cases.emplace_back("stripes 16383x3x3", std::move(stripes));
  return cases;
}

// Every level of a uint8 blit pyramid against the CPU pyramid, within 1 LSB (level 0 exact);
// returns the number of samples that are off.
int64_t expect_blit_u8_within_one_lsb(VulkanBackend& gpu, const ImageU8& img) {
  Executor exec({.threads = 1});
  const PyramidU8 want = build_pyramid(img.clone(), {}, exec);
  const PyramidU8 got = gpu.build_pyramid(img, {}, MipMethod::blit);
  EXPECT_EQ(got.num_levels(), want.num_levels());
  int64_t off = 0;
  for (int l = 0; l < std::min(got.num_levels(), want.num_levels()); ++l) {
    if (!same_extents(got.level(l), want.level(l))) {
      ADD_FAILURE() << "level " << l << " has other extents";
      continue;
    }
    EXPECT_LE(max_error(got.level(l), want.level(l)), l == 0 ? 0.0 : 1.0) << "level " << l;
    EXPECT_LT(nmse(got.level(l), want.level(l)), 1e-5) << "level " << l;
    for (int c = 0; c < img.channels(); ++c)
      for (int y = 0; y < want.level(l).height(); ++y)
        for (int x = 0; x < want.level(l).width(); ++x) off += got.level(l).at(c, y, x) != want.level(l).at(c, y, x);
  }
  return off;
}

// uint8 blit mips: the blits filter a float copy of the chain, padded to power-of-two extents
// so the driver's coordinates are exact, and a compute pass rounds each level with the CPU's
// rule (backend.cpp record_blit_mips_u8). Held to the contract directly against the CPU
// pyramid: within 1 LSB. (With exact coordinates the 2:1 filter of integers is exact, and
// lavapipe gives the CPU pyramid bit for bit on every case; without padding it was 0.25 LSB
// off on the stripes and 512 samples came out 1 LSB off, docs/how-to/vulkan.md.) The old R8_UNORM
// blit chain fails this test (3-4 LSB at deep levels).
TEST_F(Vulkan, BlitMipsU8WithinOneLsbOfCpuPyramid) {
  for (const auto& [name, img] : blit_cases_u8()) {
    SCOPED_TRACE(name);
    const int64_t off = expect_blit_u8_within_one_lsb(gpu(), img);
    std::printf("  blit u8 %s: %lld samples 1 LSB off the CPU pyramid\n", name.c_str(), (long long)off);
  }
}

// Float blit mips against the CPU pyramid, within the 1e-5 relative (floor 1e-6, as
// for compute mips). The chain is padded to power-of-two extents and every blit box has
// power-of-two extents (backend.cpp mip_blit), so every filter weight is exactly 1/2; lavapipe's
// result is then lerp(lerp(a, b), lerp(c, d)) with lerp(a, b) = a + 0.5 (b - a) in binary32,
// bit for bit, and the CPU's ((a + c) + (b + d)) * 0.25 (pyramid.hpp) differs from it by up
// to 2 ulps: 2.4e-7 relative at every size here (and over 2142 sizes up to 700x257). Without
// padding lavapipe is 2.9e-5 off at 127x33 and 1.9e-3 at 16383 wide; padded but with the
// data's own boxes, 1e-4 at 1000x6 and 5e-5 at 500x50 (docs/how-to/vulkan.md): both fail this test.
TEST_F(Vulkan, BlitMipsF32Within1e5OfCpuPyramid) {
  std::vector<Size> sizes(std::begin(kSizes), std::end(kSizes));
  sizes.insert(sizes.end(), {{3, 300, 1},  {1000, 3, 1},  {1000, 6, 1},   {500, 50, 3},
                             {4097, 9, 1}, {8191, 5, 1}, {16383, 7, 1}, {7, 16383, 1}});
  for (const Size& s : sizes) {
    SCOPED_TRACE(std::to_string(s.w) + "x" + std::to_string(s.h) + "x" + std::to_string(s.c));
    ImageF32 img = random_image_f32(s.w, s.h, s.c, 13 + s.h);
    Executor exec({.threads = 1});
    const PyramidF32 want = build_pyramid(img.clone(), {}, exec);
    const PyramidF32 got = gpu().build_pyramid(img, {}, MipMethod::blit);
    ASSERT_EQ(got.num_levels(), want.num_levels());
    double worst = 0;
    for (int l = 0; l < want.num_levels(); ++l) {
      ASSERT_TRUE(same_extents(got.level(l), want.level(l))) << "level " << l;
      const double e = max_error(got.level(l), want.level(l), 1e-6);
      worst = std::max(worst, e);
      EXPECT_LE(e, l == 0 ? 0.0 : 1e-5) << "level " << l;
      EXPECT_LT(nmse(got.level(l), want.level(l)), 1e-12) << "level " << l;
    }
    std::printf("  blit f32 %dx%dx%d: max relative |blit - CPU| %.2e\n", s.w, s.h, s.c, worst);
  }
}

// The padding of a blit image is never written by the data and holds whatever its memory
// held; where an axis's data extent is 1 and the padded extent 2, the linear filter reads
// texel 1 with weight 0, and 0 × NaN is NaN. The backend zeroes those texels (padding_guards).
// Here the pooled image is first filled with NaN by a 16x4 image of the same padded shape,
// then a 9x3 image (padded to 16x4; its level 1 is 4x1 in 8x2) must still give the CPU's
// pyramid.
TEST_F(Vulkan, BlitPaddingNeverReachesTheMips) {
  ImageF32 nans(16, 4, 1);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 16; ++x) nans.at(0, y, x) = std::numeric_limits<float>::quiet_NaN();
  const PyramidParams four{.max_levels = 4};  // 9x3's full chain, so both share one pooled image
  (void)gpu().build_pyramid(nans, four, MipMethod::blit);
  ImageF32 img = random_image_f32(9, 3, 1, 21);
  Executor exec({.threads = 1});
  const PyramidF32 want = build_pyramid(img.clone(), four, exec);
  const PyramidF32 got = gpu().build_pyramid(img, four, MipMethod::blit);
  ASSERT_EQ(got.num_levels(), 4);
  for (int l = 0; l < 4; ++l) {
    ASSERT_TRUE(same_extents(got.level(l), want.level(l))) << "level " << l;
    EXPECT_LE(max_error(got.level(l), want.level(l), 1e-6), 1e-5) << "level " << l;  // NaN fails it
  }
}

// With padding off (VulkanOptions::pad_blit_chains, also what happens when the device refuses
// the padded image) the blits filter the image's own extents and the precision is the
// driver's: uint8 stays within 1 LSB (the rounding pass absorbs up to 0.125 LSB of filter
// error, and one step past it is 1 LSB), float is held to the documented bound of 1e-4 of
// full scale up to 300 wide (lavapipe: ~x·2^-24, 1.5e-5 at 300x201).
TEST_F(Vulkan, UnpaddedBlitMipsStayWithinTheDriverBound) {
  const std::unique_ptr<VulkanBackend> plain =
      VulkanBackend::create({.device = "", .validation = true, .pad_blit_chains = false});
  for (const auto& [name, img] : blit_cases_u8()) {
    SCOPED_TRACE(name);
    const int64_t off = expect_blit_u8_within_one_lsb(*plain, img);
    std::printf("  unpadded blit u8 %s: %lld samples 1 LSB off the CPU pyramid\n", name.c_str(), (long long)off);
  }
  for (const Size& s : kSizes) {
    SCOPED_TRACE(std::to_string(s.w) + "x" + std::to_string(s.h) + "x" + std::to_string(s.c));
    ImageF32 img = random_image_f32(s.w, s.h, s.c, 13 + s.h);
    Executor exec({.threads = 1});
    const PyramidF32 want = build_pyramid(img.clone(), {}, exec);
    const PyramidF32 got = plain->build_pyramid(img, {}, MipMethod::blit);
    ASSERT_EQ(got.num_levels(), want.num_levels());
    for (int l = 0; l < want.num_levels(); ++l) {
      ASSERT_TRUE(same_extents(got.level(l), want.level(l))) << "level " << l;
      EXPECT_LE(max_error(got.level(l), want.level(l), 1.0), l == 0 ? 0.0 : 1e-4) << "level " << l;
      EXPECT_LT(nmse(got.level(l), want.level(l)), 1e-9) << "level " << l;
    }
  }
  EXPECT_EQ(plain->validation_errors(), 0) << [&] {
    std::string all;
    for (const std::string& m : plain->validation_messages()) all += "  " + m + "\n";
    return all;
  }();
}

TEST_F(Vulkan, BatchOfImagesIsOneArrayTexture) {
  std::vector<ImageU8> imgs;
  for (int i = 0; i < 5; ++i) imgs.push_back(random_image(77, 45, 3, 100 + i));
  std::vector<const ImageU8*> ptrs;
  for (const auto& im : imgs) ptrs.push_back(&im);
  for (MipMethod m : {MipMethod::compute, MipMethod::blit}) {
    const std::vector<PyramidU8> got = gpu().build_pyramids(ptrs, {}, m);
    ASSERT_EQ(got.size(), imgs.size());
    for (size_t i = 0; i < imgs.size(); ++i) {
      const PyramidU8 single = gpu().build_pyramid(imgs[i], {}, m);
      ASSERT_EQ(got[i].num_levels(), single.num_levels());
      for (int l = 0; l < single.num_levels(); ++l)
        EXPECT_EQ(max_error(got[i].level(l), single.level(l)), 0.0) << "image " << i << " level " << l;
    }
  }
  ImageU8 other = random_image(76, 45, 3, 1);
  ptrs.push_back(&other);
  EXPECT_THROW(gpu().build_pyramids(ptrs, {}, MipMethod::compute), Error);
}

// ---- foveated sampling ----------------------------------------------------------------------

Tokenization cpu_tokens(const ImageU8& img, int P, const ExtractParams& ep, float fx, float fy, int budget = 120) {
  TokenizeParams tp;
  tp.patch_px = P;
  tp.alloc.budget_tokens = budget;
  tp.extract = ep;
  Query q;
  q.fixations.push_back({fx, fy, 1.0f});
  Executor exec({.threads = 1});
  return tokenize(img.clone(), q, tp, exec);
}

void expect_same_batch(const TokenBatch& got, const TokenBatch& want) {
  ASSERT_EQ(got.patches.shape(), want.patches.shape());
  ASSERT_EQ(got.patches.dtype(), want.patches.dtype());
  EXPECT_EQ(got.level_offsets, want.level_offsets);
  EXPECT_EQ(std::memcmp(got.positions.bytes(), want.positions.bytes(), want.positions.size_bytes()), 0);
  EXPECT_EQ(std::memcmp(got.levels.bytes(), want.levels.bytes(), want.levels.size_bytes()), 0);
  const int64_t n = want.patches.numel();
  if (want.patches.dtype() == DType::f32) {
    const float* a = got.patches.data<float>();
    const float* b = want.patches.data<float>();
    double worst = 0, num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1e-3, std::abs(double(b[i]))));
      num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      den += double(b[i]) * b[i];
    }
    EXPECT_LE(worst, 1e-5);
    EXPECT_LT(num / std::max(den, 1e-30), 1e-12);
  } else {
    EXPECT_EQ(std::memcmp(got.patches.bytes(), want.patches.bytes(), want.patches.size_bytes()), 0);
  }
}

TEST_F(Vulkan, SamplingEqualsCpuExtractionU8) {
  ImageU8 img = random_image(301, 187, 3, 21);
  ExtractParams ep;
  ep.dtype = DType::u8;
  const Tokenization t = cpu_tokens(img, 16, ep, 80, 60);
  ASSERT_GT(t.allocation.max_level, 1);
  expect_same_batch(gpu().extract(img, t.allocation, ep, MipMethod::compute), t.batch);
  // Blit mips are only held to 1 LSB of the CPU pyramid: sampling from them must equal the
  // CPU extraction from that same (read back) pyramid, bit for bit.
  Executor exec({.threads = 1});
  const PyramidU8 blit = gpu().build_pyramid(img, {.max_levels = t.allocation.max_level + 1}, MipMethod::blit);
  expect_same_batch(gpu().extract(img, t.allocation, ep, MipMethod::blit), extract(blit, t.allocation, ep, exec));
}

TEST_F(Vulkan, SamplingEqualsCpuExtractionFloatAndHalf) {
  ImageU8 img = random_image(257, 129, 3, 22);
  for (DType dt : {DType::f32, DType::f16}) {
    for (bool norm : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (norm ? " normalised" : " raw"));
      ExtractParams ep;
      ep.dtype = dt;
      ep.norm.enabled = norm;
      ep.norm.mean = {0.5f, 0.25f, 0.125f};
      const Tokenization t = cpu_tokens(img, 14, ep, 200, 30);
      expect_same_batch(gpu().extract(img, t.allocation, ep), t.batch);
    }
  }
}

TEST_F(Vulkan, SamplingGrayAndOddSizes) {
  for (const Size& s : {Size{45, 200, 1}, Size{33, 17, 3}, Size{16, 16, 1}}) {
    SCOPED_TRACE(std::to_string(s.w) + "x" + std::to_string(s.h) + "x" + std::to_string(s.c));
    ImageU8 img = random_image(s.w, s.h, s.c, 23 + s.w);
    ExtractParams ep;
    ep.dtype = DType::u8;
    for (int P : {8, 6}) {  // 6: rows not word-aligned, the shader packs word by word
      const Tokenization t = cpu_tokens(img, P, ep, 10, 10, 40);
      expect_same_batch(gpu().extract(img, t.allocation, ep), t.batch);
    }
  }
}

// Tokens in a shuffled order: neighbouring invocations sample different levels (divergent
// lod), which the level-sorted layouts above exercise only at level boundaries. P = 6 and 14
// make the 3·P rows (or 27 words) of a token straddle groups of 4 and 8 invocations.
TEST_F(Vulkan, SamplingWithDivergentLevelsAcrossInvocations) {
  ImageU8 img = random_image(280, 190, 3, 31);
  for (auto [dt, P] : {std::pair{DType::u8, 6}, std::pair{DType::f32, 6}, std::pair{DType::f32, 14}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " P=" + std::to_string(P));
    ExtractParams ep;
    ep.dtype = dt;
    const Tokenization t = cpu_tokens(img, P, ep, 60, 90, 150);
    ASSERT_GE(t.allocation.max_level, 2);
    Allocation shuffled = t.allocation;
    std::vector<size_t> order(shuffled.layout.tokens.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = (i * 7919) % order.size();  // 7919 is prime
    ASSERT_NE(order.size() % 7919, 0u);
    for (size_t i = 0; i < order.size(); ++i) shuffled.layout.tokens[i] = t.allocation.layout.tokens[order[i]];
    const TokenBatch got = gpu().extract(img, shuffled, ep);
    const size_t per = size_t(3 * P * P) * dtype_size(dt);
    size_t bad = 0;
    for (size_t i = 0; i < order.size(); ++i)
      bad += std::memcmp(got.patches.bytes() + i * per, t.batch.patches.bytes() + order[i] * per, per) != 0;
    EXPECT_EQ(bad, 0u) << "of " << order.size() << " tokens (" << dtype_name(dt) << ")";
  }
}

TEST_F(Vulkan, SamplingBatchEqualsEachImage) {
  std::vector<ImageU8> imgs;
  std::vector<Tokenization> ts;
  ExtractParams ep;
  for (int i = 0; i < 4; ++i) {
    imgs.push_back(random_image(160, 96, 3, 40 + i));
    ts.push_back(cpu_tokens(imgs.back(), 16, ep, 20.0f + 40 * i, 50, 30 + 7 * i));
  }
  std::vector<const ImageU8*> ip;
  std::vector<const Allocation*> ap;
  for (int i = 0; i < 4; ++i) {
    ip.push_back(&imgs[i]);
    ap.push_back(&ts[i].allocation);
  }
  const std::vector<TokenBatch> got = gpu().extract_batch(ip, ap, ep);
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i) expect_same_batch(got[i], ts[i].batch);
  // One array texture for the batch: four images cost the submissions of one (upload, mips,
  // rate maps, dispatch, readback), not four times as many.
  const int batch_submissions = gpu().last_timings().submissions;
  (void)gpu().extract(imgs[0], ts[0].allocation, ep);
  const int single_submissions = gpu().last_timings().submissions;
  EXPECT_GE(single_submissions, 3);  // at least upload, mips (or sampling) and readback
  EXPECT_EQ(batch_submissions, single_submissions);
}

TEST_F(Vulkan, TokenizeEqualsCpuTokenize) {
  ImageU8 img = random_image(333, 250, 3, 60);
  TokenizeParams tp;
  tp.patch_px = 16;
  tp.alloc.budget_tokens = 90;
  Query q;
  q.fixations.push_back({100.0f, 200.0f, 1.0f});
  Executor exec({.threads = 1});
  const Tokenization want = tokenize(img.clone(), q, tp, exec);
  const Tokenization got = gpu().tokenize(img.clone(), q, tp, exec);
  ASSERT_EQ(got.pyramid.num_levels(), want.pyramid.num_levels());
  for (int l = 0; l < want.pyramid.num_levels(); ++l)
    EXPECT_EQ(max_error(got.pyramid.level(l), want.pyramid.level(l)), 0.0) << "level " << l;
  EXPECT_EQ(got.allocation.rate_map.level, want.allocation.rate_map.level);
  expect_same_batch(got.batch, want.batch);
  // The uniform baseline: the pyramid (for the relevance statistics) on the device, the grid
  // cut on the CPU; the same tokens.
  tp.uniform = true;
  const Tokenization uwant = tokenize(img.clone(), q, tp, exec);
  const Tokenization ugot = gpu().tokenize(img.clone(), q, tp, exec);
  ASSERT_TRUE(ugot.is_uniform());
  EXPECT_EQ(ugot.relevance.score, uwant.relevance.score);
  expect_same_batch(ugot.batch, uwant.batch);
}

// The Vulkan stages sample the pyramid they left on the device, unless another call of the
// backend has rebuilt the pooled image since (here with another image of the same shape, so
// the same image is overwritten) or they are given another pyramid: then they upload that
// pyramid's level 0. Either way the tokens are the CPU extraction's from the given pyramid.
TEST_F(Vulkan, TokenizeStagesNeverSampleAStalePyramid) {
  const ImageU8 a = random_image(190, 130, 3, 61), b = random_image(190, 130, 3, 62);
  ExtractParams ep;
  ep.dtype = DType::u8;
  const Tokenization ta = cpu_tokens(a, 16, ep, 40, 50), tb = cpu_tokens(b, 16, ep, 150, 90);
  const int levels = std::max(ta.allocation.max_level, tb.allocation.max_level) + 1;
  Executor exec({.threads = 1});
  std::unique_ptr<TokenizeStages> stages = gpu().tokenize_stages();
  const PyramidU8 pa = stages->build_pyramid(a.clone(), {.max_levels = levels}, exec);
  expect_same_batch(stages->extract(pa, ta.allocation, ep, exec), ta.batch);  // resident
  (void)gpu().build_pyramid(b, {.max_levels = levels}, MipMethod::compute);  // overwrites it
  expect_same_batch(stages->extract(pa, ta.allocation, ep, exec), ta.batch);
  const PyramidU8 pb = build_pyramid(b.clone(), {.max_levels = levels}, exec);
  const PyramidU8 pa2 = stages->build_pyramid(a.clone(), {.max_levels = levels}, exec);
  expect_same_batch(stages->extract(pb, tb.allocation, ep, exec), tb.batch);  // not the resident one
  expect_same_batch(stages->extract(pa2, ta.allocation, ep, exec), ta.batch);
}

// The CLI: --backend vulkan writes the same token file as the CPU; a device that matches
// nothing is a one-line error; fovea devices lists the device.
TEST_F(Vulkan, CliBackendVulkanWritesTheCpuFile) {
  const std::string dir = test::temp_dir("vulkan_cli");
  const std::string image = dir + "/in.png";
  save_png(random_image(211, 150, 3, 70), image);
  std::string bytes[2];
  for (int i = 0; i < 2; ++i) {
    const std::string out = dir + (i ? "/gpu.safetensors" : "/cpu.safetensors");
    const auto r = test::run_cli({"tokenize", image, "--fixation", "50,60", "--budget", "60", "--backend",
                                  i ? "vulkan" : "cpu", "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ifstream f(out, std::ios::binary);
    bytes[i].assign(std::istreambuf_iterator<char>(f), {});
  }
  EXPECT_FALSE(bytes[0].empty());
  EXPECT_TRUE(bytes[0] == bytes[1]) << "--backend vulkan wrote a different token file";
  const auto bad = test::run_cli({"tokenize", image, "--backend", "vulkan", "--device", "no-such-gpu"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("matches no usable device"), std::string::npos) << bad.err;
  // No driver at all (the loader finds no ICD): a note on stderr and the CPU path, exit 0.
  ::setenv("VK_ICD_FILENAMES", "/nonexistent/fovea-no-icd.json", 1);
  ::setenv("VK_DRIVER_FILES", "/nonexistent/fovea-no-icd.json", 1);
  const auto none = test::run_cli({"tokenize", image, "--fixation", "50,60", "--budget", "60", "--backend", "vulkan",
                                   "-o", dir + "/fallback.safetensors"});
  ::unsetenv("VK_ICD_FILENAMES");
  ::unsetenv("VK_DRIVER_FILES");
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.err.find("no usable Vulkan device found; using the CPU"), std::string::npos) << none.err;
  const auto dev = test::run_cli({"devices"});
  EXPECT_EQ(dev.exit_code, 0);
  EXPECT_NE(dev.out.find(gpu().device().name), std::string::npos) << dev.out;
}

TEST_F(Vulkan, RateMapDisagreeingWithLayoutIsAnError) {
  ImageU8 img = random_image(128, 128, 3, 50);
  ExtractParams ep;
  ep.dtype = DType::u8;
  Tokenization t = cpu_tokens(img, 16, ep, 10, 10, 30);
  Allocation bad = t.allocation;
  const Token& last = bad.layout.tokens.back();
  const int tile = (last.y << last.level) * bad.rate_map.grid.tiles_x + (last.x << last.level);
  bad.rate_map.level[tile] = uint8_t(last.level == 0 ? 1 : 0);
  try {
    gpu().extract(img, bad, ep);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("rate map and the token layout disagree"), std::string::npos) << e.what();
  }
}

// The backend keeps its images, buffers and descriptor sets across calls (backend.cpp,
// PooledImage): a sequence that reuses, grows, shrinks and evicts them must give every call
// the CPU's answer, with no validation message (stale descriptors would be one).
TEST_F(Vulkan, RepeatedCallsReuseResourcesAndStayExact) {
  ExtractParams ep;
  ep.dtype = DType::u8;
  struct Call {
    int w, h, budget;
    float fx;
    MipMethod method;
  };
  const Call calls[] = {
      {301, 187, 120, 80, MipMethod::compute},  // first shape
      {301, 187, 40, 200, MipMethod::compute},  // same shape, fewer tokens (buffers reused)
      {301, 187, 300, 20, MipMethod::blit},     // more tokens: buffers grow; blit reuses the image
      {160, 96, 30, 50, MipMethod::compute},    // second shape
      {97, 203, 50, 10, MipMethod::blit},       // third shape: the pool of 2 evicts the first
      {301, 187, 120, 80, MipMethod::compute},  // the first again, recreated
      {160, 96, 60, 90, MipMethod::compute},
      {97, 203, 50, 30, MipMethod::compute},    // three shapes in turn: every call evicts one
      {301, 187, 90, 60, MipMethod::compute},
      {160, 96, 20, 10, MipMethod::compute},
      {97, 203, 70, 80, MipMethod::blit},
      {301, 187, 50, 250, MipMethod::blit},
      {160, 96, 40, 140, MipMethod::blit},
  };
  Executor exec({.threads = 1});
  int i = 0;
  for (const Call& c : calls) {
    SCOPED_TRACE("call " + std::to_string(i));
    ImageU8 img = random_image(c.w, c.h, 3, 500 + i++);
    const Tokenization t = cpu_tokens(img, 16, ep, c.fx, 40, c.budget);
    const PyramidU8 want = build_pyramid(img.clone(), {}, exec);
    const PyramidU8 got = gpu().build_pyramid(img, {}, c.method);
    ASSERT_EQ(got.num_levels(), want.num_levels());
    for (int l = 0; l < want.num_levels(); ++l)
      EXPECT_LE(max_error(got.level(l), want.level(l)), c.method == MipMethod::compute ? 0.0 : 1.0) << "level " << l;
    if (c.method == MipMethod::compute) {
      expect_same_batch(gpu().extract(img, t.allocation, ep, c.method), t.batch);
    } else {
      const PyramidU8 p = gpu().build_pyramid(img, {.max_levels = t.allocation.max_level + 1}, c.method);
      expect_same_batch(gpu().extract(img, t.allocation, ep, c.method), extract(p, t.allocation, ep, exec));
    }
  }
}

// ---- errors ----------------------------------------------------------------------------------

TEST_F(Vulkan, AbsurdImageSizeIsACleanError) {
  // Wider than any device's maxImageDimension2D, yet a small host buffer.
  ImageU8 wide(1 << 20, 1, 1, true);
  try {
    gpu().build_pyramid(wide, {}, MipMethod::compute);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::limit_exceeded) << e.what();
  }
}

#ifdef FOVEA_HAVE_VULKAN
// The rate map rendered as a VK_KHR_fragment_shading_rate attachment: every pixel must report
// (gl_ShadingRateEXT) its tile's code, or, where the device lacks that rate, one the spec's
// fallback rule allows. Needs a device with the extension and attachment rates; lavapipe has
// neither, so there it is a skip that says why. Not yet run on such a device (docs/how-to/vulkan.md).
TEST_F(Vulkan, ShadingRateRender) {
  // A rate map with all three codes: 1x1 (level 0), 2x2 (level 1), 4x4 (level >= 2).
  ImageU8 img = random_image(256, 192, 3, 90);
  const Tokenization t = cpu_tokens(img, 16, {}, 20, 20, 60);
  const RateMap& map = t.allocation.rate_map;
  const std::vector<uint8_t> codes = map.shading_rate_codes();
  for (uint8_t want : {uint8_t(0), uint8_t(5), uint8_t(10)})
    ASSERT_NE(std::find(codes.begin(), codes.end(), want), codes.end()) << "the rate map lacks code " << int(want);

  vk::Instance inst({.validation = true});
  const vk::PhysicalDeviceInfo pd = vk::select_device(inst, std::to_string(gpu().device().index));
  const vk::ShadingRateCaps caps = vk::query_shading_rate(inst, pd);
  if (!caps.why_not.empty())
    GTEST_SKIP() << caps.why_not
                 << (pd.name().find("llvmpipe") != std::string::npos ? " (lavapipe does not implement it)" : "")
                 << ": the rate map's shading-rate codes cannot be rendered with here";
  const vk::TexelPlan plan = vk::plan_texel_size(map.grid.patch_px, caps);
  if (!plan.why_not.empty()) GTEST_SKIP() << pd.name() << ": " << plan.why_not;

  const vk::ShadingRateRender r = vk::render_shading_rate(inst, pd, map);
  ASSERT_EQ(r.width, map.grid.tiles_x * 16);
  ASSERT_EQ(r.height, map.grid.tiles_y * 16);
  ASSERT_EQ(r.seen.size(), size_t(r.width) * r.height);
  // The spec reports "the result of the second combination" through ShadingRateKHR and
  // clamps it to a supported rate; the requested code itself is accepted as well as the
  // clamp's candidates, in case a device reports the rate before clamping.
  int bad_tiles = 0;
  std::map<uint8_t, std::set<uint8_t>> seen_per_code;
  for (int ty = 0; ty < map.grid.tiles_y; ++ty)
    for (int tx = 0; tx < map.grid.tiles_x; ++tx) {
      const uint8_t code = codes[size_t(ty) * map.grid.tiles_x + tx];
      std::vector<uint8_t> ok = vk::shading_rate_candidates(code, caps.rates);
      ok.push_back(code);
      std::set<uint8_t> values;
      for (int y = ty * 16; y < ty * 16 + 16; ++y)
        for (int x = tx * 16; x < tx * 16 + 16; ++x) values.insert(r.seen[size_t(y) * r.width + x]);
      const bool good = values.size() == 1 && std::find(ok.begin(), ok.end(), *values.begin()) != ok.end();
      if (!good && bad_tiles++ < 5)
        ADD_FAILURE() << "tile (" << tx << ", " << ty << ") code " << int(code) << " saw " << values.size()
                      << " value(s), first " << int(*values.begin());
      seen_per_code[code].insert(values.begin(), values.end());
    }
  EXPECT_EQ(bad_tiles, 0);
  // 1x1 and 2x2 are rates every implementation must support (at 1 sample): exact.
  EXPECT_EQ(seen_per_code[0], std::set<uint8_t>{0});
  EXPECT_EQ(seen_per_code[5], std::set<uint8_t>{5});
  std::printf("  shading-rate render on %s: texel %u px, code 10 (4x4) shaded as", pd.name().c_str(), r.texel);
  for (uint8_t v : seen_per_code[10]) std::printf(" %d", int(v));
  std::printf("\n");
  EXPECT_EQ(inst.validation_errors(), 0) << (inst.validation_messages().empty() ? "" : inst.validation_messages()[0]);
}

// ComputeKernel::record_cached: one descriptor set per distinct binding list, reused; dropped
// by forget_cached(); the results equal record()'s.
TEST(VulkanLayer, KernelReusesCachedDescriptorSets) {
  if (!vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  vk::Instance inst({.validation = true});
  const vk::PhysicalDeviceInfo pd = vk::select_device(inst, "");
  {
    vk::Device dev(inst, pd);
    // The f32 mip kernel on a 2x2 -> 1x1 image: small enough to set up by hand.
    static const uint32_t spirv[] =
#include "fovea_spirv/mip_f32.spv.inc"
        ;
    vk::ComputeKernel k(dev, spirv, {VK_DESCRIPTOR_TYPE_STORAGE_IMAGE, VK_DESCRIPTOR_TYPE_STORAGE_IMAGE}, 16, 4,
                        "mip_f32");
    vk::ImageDesc d;
    d.format = VK_FORMAT_R32_SFLOAT;
    d.width = d.height = 2;
    d.levels = 2;
    d.usage = VK_IMAGE_USAGE_STORAGE_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT;
    vk::Image img = vk::Image::create(dev, d);
    const VkImageView v0 = img.create_view(VK_FORMAT_R32_SFLOAT, 0, 1), v1 = img.create_view(VK_FORMAT_R32_SFLOAT, 1, 1);
    vk::Buffer up = vk::Buffer::create(dev, 16, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, vk::MemoryUse::upload);
    vk::Buffer down = vk::Buffer::create(dev, 4, VK_BUFFER_USAGE_TRANSFER_DST_BIT, vk::MemoryUse::readback);
    const float texels[4] = {1.0f, 2.0f, 3.0f, 6.0f};
    std::memcpy(up.mapped(), texels, 16);
    vk::Commands cmds(dev, dev.compute_queue());
    const int32_t push[4] = {2, 2, 1, 1};
    const vk::Binding forward[] = {vk::Binding::storage_image(v0), vk::Binding::storage_image(v1)};
    const vk::Binding backward[] = {vk::Binding::storage_image(v1), vk::Binding::storage_image(v0)};
    for (int round = 0; round < 3; ++round) {
      VkCommandBuffer cb = cmds.begin();
      vk::image_barrier(cb, img.handle(), 0, 2, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                        VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0, VK_PIPELINE_STAGE_TRANSFER_BIT,
                        VK_ACCESS_TRANSFER_WRITE_BIT);
      VkBufferImageCopy r{};
      r.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
      r.imageExtent = {2, 2, 1};
      vkCmdCopyBufferToImage(cb, up.handle(), img.handle(), VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &r);
      vk::image_barrier(cb, img.handle(), 0, 2, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_GENERAL,
                        VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
      k.record_cached(cb, forward, push, 1, 1, 1);
      vk::image_barrier(cb, img.handle(), 1, 1, VK_IMAGE_LAYOUT_GENERAL, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL,
                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                        VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
      r.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 1, 0, 1};
      r.imageExtent = {1, 1, 1};
      vkCmdCopyImageToBuffer(cb, img.handle(), VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, down.handle(), 1, &r);
      vk::memory_barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
      cmds.submit_and_wait();
      EXPECT_EQ(*static_cast<const float*>(down.mapped()), 3.0f) << "round " << round;  // (1+3+2+6)/4
      EXPECT_EQ(k.cached_sets(), 1u) << "round " << round;
    }
    // A second binding list gets its own set (recorded, not run); forget_cached drops both.
    VkCommandBuffer cb = cmds.begin();
    vk::image_barrier(cb, img.handle(), 1, 1, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, VK_IMAGE_LAYOUT_GENERAL,
                      VK_PIPELINE_STAGE_TRANSFER_BIT, 0, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0);
    k.record_cached(cb, backward, push, 0, 1, 1);
    k.record_cached(cb, forward, push, 0, 1, 1);
    EXPECT_EQ(k.cached_sets(), 2u);
    cmds.submit_and_wait();
    k.forget_cached();
    EXPECT_EQ(k.cached_sets(), 0u);
  }
  EXPECT_EQ(inst.validation_errors(), 0) << (inst.validation_messages().empty() ? "" : inst.validation_messages()[0]);
}

// The parts of the render that are functions of their inputs, checked on every device.
TEST(VulkanLayer, ShadingRateFallbackFollowsTheSpec) {
  using C = std::vector<uint8_t>;
  const uint8_t c1x1 = 0, c2x2 = 5, c4x4 = 10, c4x2 = 9, c2x4 = 6, c2x1 = 4, c1x4 = 2, c4x1 = 8;
  EXPECT_EQ(vk::shading_rate_code({4, 4}), c4x4);
  EXPECT_EQ(vk::shading_rate_code({2, 1}), c2x1);
  EXPECT_EQ(vk::shading_rate_size(c4x2).width, 4u);
  EXPECT_EQ(vk::shading_rate_size(c4x2).height, 2u);
  const std::vector<VkExtent2D> full = {{4, 4}, {4, 2}, {2, 4}, {2, 2}, {2, 1}, {1, 2}, {1, 1}};
  for (uint8_t c : {c1x1, c2x2, c4x4, c4x2}) EXPECT_EQ(vk::shading_rate_candidates(c, full), C{c});
  // Without 4x4: the largest area below it, 4x2 and 2x4 (same aspect sum): either.
  const std::vector<VkExtent2D> no4x4 = {{4, 2}, {2, 4}, {2, 2}, {2, 1}, {1, 2}, {1, 1}};
  EXPECT_EQ(vk::shading_rate_candidates(c4x4, no4x4), (C{c2x4, c4x2}));
  // The spec's minimum set ({2,2}, {2,1}, {1,1}): 4x4 falls back to 2x2, 2x2 stays.
  const std::vector<VkExtent2D> minimum = {{2, 2}, {2, 1}, {1, 1}};
  EXPECT_EQ(vk::shading_rate_candidates(c4x4, minimum), C{c2x2});
  EXPECT_EQ(vk::shading_rate_candidates(c2x2, minimum), C{c2x2});
  // 4x1 without 4x1: strictly 2x1; an implementation that also keeps swapped rates may take 1x4.
  const std::vector<VkExtent2D> tall = {{2, 2}, {2, 1}, {1, 4}, {1, 1}};
  EXPECT_EQ(vk::shading_rate_candidates(c4x1, tall), (C{c1x4, c2x1}));
  EXPECT_EQ(vk::shading_rate_candidates(c4x4, {}), C{c4x4});
}

TEST(VulkanLayer, ShadingRateTexelPlan) {
  vk::ShadingRateCaps caps;
  caps.min_texel = {8, 8};
  caps.max_texel = {32, 32};
  EXPECT_EQ(vk::plan_texel_size(16, caps).texel, 16u);  // the patch itself
  EXPECT_EQ(vk::plan_texel_size(16, caps).per_tile, 1u);
  EXPECT_EQ(vk::plan_texel_size(64, caps).texel, 32u);  // clamped to the maximum: 2x2 texels a tile
  EXPECT_EQ(vk::plan_texel_size(64, caps).per_tile, 2u);
  EXPECT_EQ(vk::plan_texel_size(24, caps).texel, 8u);   // the largest power of two dividing 24
  const vk::TexelPlan p12 = vk::plan_texel_size(12, caps);  // 4 divides 12, but 4 < 8
  EXPECT_EQ(p12.texel, 0u);
  EXPECT_NE(p12.why_not.find("no power-of-two attachment texel size maps 12-px tiles exactly"), std::string::npos)
      << p12.why_not;
  EXPECT_NE(vk::plan_texel_size(14, caps).why_not.find("not a multiple of 4"), std::string::npos);
  caps.min_texel = {32, 32};
  EXPECT_NE(vk::plan_texel_size(16, caps).why_not.find("device texel sizes 32x32 .. 32x32"), std::string::npos);
  caps.min_texel = {8, 16};  // non-square limits: square texels within both
  EXPECT_EQ(vk::plan_texel_size(16, caps).texel, 16u);
}

TEST(VulkanLayer, ShadingRateAttachmentTexels) {
  RateMap m;
  m.grid = TileGrid::make(48, 32, 16);  // 3 x 2 tiles
  m.level = {0, 1, 2, 3, 1, 0};
  EXPECT_EQ(vk::shading_rate_texels(m, 1), (std::vector<uint8_t>{0, 5, 10, 10, 5, 0}));
  const std::vector<uint8_t> two = vk::shading_rate_texels(m, 2);  // 6 x 4 texels
  ASSERT_EQ(two.size(), 24u);
  EXPECT_EQ(two[0], 0);
  EXPECT_EQ(two[1], 0);
  EXPECT_EQ(two[2], 5);
  EXPECT_EQ(two[6 + 5], 10);
  EXPECT_EQ(two[3 * 6 + 0], 10);
  EXPECT_EQ(two[3 * 6 + 5], 0);
}

TEST(VulkanLayer, ShadingRateQueryOnThisDevice) {
  if (!vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  vk::Instance inst({.validation = true});
  const vk::PhysicalDeviceInfo pd = vk::select_device(inst, "");
  const vk::ShadingRateCaps caps = vk::query_shading_rate(inst, pd);
  EXPECT_EQ(caps.extension, pd.has_extension("VK_KHR_fragment_shading_rate"));
  if (!caps.extension) {
    EXPECT_NE(caps.why_not.find("does not offer VK_KHR_fragment_shading_rate"), std::string::npos) << caps.why_not;
    ImageU8 img = random_image(64, 64, 3, 1);
    const Tokenization t = cpu_tokens(img, 16, {}, 10, 10, 10);
    try {
      vk::render_shading_rate(inst, pd, t.allocation.rate_map);
      FAIL() << "rendered without the extension";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::unsupported);
      EXPECT_NE(std::string(e.what()).find("VK_KHR_fragment_shading_rate"), std::string::npos) << e.what();
    }
  } else if (caps.why_not.empty()) {
    // The spec's required rates at one sample, and sane texel limits.
    for (VkExtent2D need : {VkExtent2D{2, 2}, VkExtent2D{2, 1}, VkExtent2D{1, 1}})
      EXPECT_NE(std::find_if(caps.rates.begin(), caps.rates.end(),
                             [&](VkExtent2D r) { return r.width == need.width && r.height == need.height; }),
                caps.rates.end());
    EXPECT_LE(caps.min_texel.width, caps.max_texel.width);
    EXPECT_LE(caps.min_texel.height, caps.max_texel.height);
  }
  EXPECT_EQ(inst.validation_errors(), 0);
}
#endif

#ifdef FOVEA_HAVE_VULKAN
// ---- the RAII layer itself -------------------------------------------------------------------

TEST(VulkanLayer, ResultsMapToErrorCodes) {
  EXPECT_EQ(vk::errc_of(VK_ERROR_OUT_OF_DEVICE_MEMORY), Errc::out_of_memory);
  EXPECT_EQ(vk::errc_of(VK_ERROR_OUT_OF_HOST_MEMORY), Errc::out_of_memory);
  EXPECT_EQ(vk::errc_of(VK_ERROR_DEVICE_LOST), Errc::device);
  EXPECT_EQ(vk::errc_of(VK_ERROR_FEATURE_NOT_PRESENT), Errc::unsupported);
  EXPECT_NO_THROW(vk::check(VK_INCOMPLETE, "x"));
  try {
    vk::check(VK_ERROR_DEVICE_LOST, "vkQueueSubmit");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::device);
    EXPECT_NE(std::string(e.what()).find("vkQueueSubmit failed: VK_ERROR_DEVICE_LOST"), std::string::npos);
  }
}

TEST(VulkanLayer, DeviceQueuesMemoryAndCopies) {
  if (!vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  vk::Instance inst({.validation = true});
  const vk::PhysicalDeviceInfo pd = vk::select_device(inst, "");
  EXPECT_EQ(vk::select_device(inst, std::to_string(pd.index)).index, pd.index);
  EXPECT_EQ(vk::select_device(inst, pd.name().substr(0, 4)).index, pd.index);
  EXPECT_THROW(vk::select_device(inst, "no-such-device-xyz"), Error);
  EXPECT_THROW(vk::select_device(inst, "99"), Error);
  {
    vk::Device dev(inst, pd, {.want_sparse = true});
    EXPECT_TRUE(dev.compute_queue().flags & VK_QUEUE_COMPUTE_BIT);
    if (pd.features.sparseBinding) {
      ASSERT_NE(dev.sparse_queue(), nullptr);
      EXPECT_TRUE(dev.sparse_queue()->flags & VK_QUEUE_SPARSE_BINDING_BIT);
      EXPECT_TRUE(dev.enabled_features().sparseBinding);
    }
    // Buffer round trip through device memory.
    const size_t n = 1 << 16;
    vk::Buffer up = vk::Buffer::create(dev, n, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, vk::MemoryUse::upload);
    vk::Buffer mid = vk::Buffer::create(dev, n, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                        vk::MemoryUse::device);
    vk::Buffer down = vk::Buffer::create(dev, n, VK_BUFFER_USAGE_TRANSFER_DST_BIT, vk::MemoryUse::readback);
    for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(up.mapped())[i] = uint8_t(i * 31 + 7);
    vk::Commands cmds(dev, dev.transfer_queue());
    VkCommandBuffer cb = cmds.begin();
    const VkBufferCopy all{0, 0, n};
    vkCmdCopyBuffer(cb, up.handle(), mid.handle(), 1, &all);
    vk::memory_barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_ACCESS_TRANSFER_READ_BIT);
    vkCmdCopyBuffer(cb, mid.handle(), down.handle(), 1, &all);
    vk::memory_barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                       VK_ACCESS_HOST_READ_BIT);
    cmds.submit_and_wait();
    EXPECT_EQ(std::memcmp(up.mapped(), down.mapped(), n), 0);
    vk::Buffer moved = std::move(down);
    EXPECT_EQ(down.handle(), VK_NULL_HANDLE);
    EXPECT_NE(moved.handle(), VK_NULL_HANDLE);

    // Out of memory: within the image limits, far beyond any heap.
    vk::ImageDesc huge;
    huge.format = VK_FORMAT_R32_SFLOAT;
    huge.width = huge.height = std::min(16384u, dev.limits().maxImageDimension2D);
    huge.layers = std::min(2048u, dev.limits().maxImageArrayLayers);
    try {
      vk::Image::create(dev, huge);
      FAIL() << "a " << huge.width << "x" << huge.height << "x" << huge.layers << " float image was accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == Errc::out_of_memory || e.code() == Errc::limit_exceeded) << e.what();
    }
    vk::ImageDesc zero;
    zero.width = 0;
    EXPECT_THROW(vk::Image::create(dev, zero), Error);
  }
  EXPECT_EQ(inst.validation_errors(), 0) << (inst.validation_messages().empty() ? "" : inst.validation_messages()[0]);
}
#endif

}  // namespace
}  // namespace fovea
