// rebuild_pyramid: recomputing levels 1.. into a pyramid's existing storage gives
// build_pyramid's bits, keeps the buffers when the extents fit, and reallocates or drops
// levels when they do not.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/pyramid.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

template <typename T>
void expect_equal_pyramids(const Pyramid<T>& got, const Pyramid<T>& want) {
  ASSERT_EQ(got.num_levels(), want.num_levels());
  for (int l = 0; l < want.num_levels(); ++l) {
    const Image<T>& a = got.level(l);
    const Image<T>& b = want.level(l);
    ASSERT_EQ(a.width(), b.width()) << "level " << l;
    ASSERT_EQ(a.height(), b.height()) << "level " << l;
    ASSERT_EQ(a.channels(), b.channels()) << "level " << l;
    for (int c = 0; c < b.channels(); ++c)
      for (int y = 0; y < b.height(); ++y)
        ASSERT_EQ(std::memcmp(a.row(c, y), b.row(c, y), sizeof(T) * size_t(b.width())), 0)
            << "level " << l << " channel " << c << " row " << y;
  }
}

template <typename T>
Image<T> image_of(int w, int h, int c, uint32_t seed) {
  if constexpr (sizeof(T) == 1) return test::random_image(w, h, c, seed);
  else return test::random_image_f32(w, h, c, seed);
}

template <typename T>
void rebuild_matches_build() {
  for (const int threads : {1, 2, 3}) {
    Executor exec({.threads = threads});
    // Odd and non-square extents; the second frame has the first one's size.
    Pyramid<T> pyr = build_pyramid(image_of<T>(301, 77, 3, 1), {}, exec);
    std::vector<const T*> buffers;
    for (int l = 1; l < pyr.num_levels(); ++l) buffers.push_back(pyr.level(l).plane(0));
    pyr.level(0) = image_of<T>(301, 77, 3, 2);
    rebuild_pyramid(pyr, {}, exec);
    expect_equal_pyramids(pyr, build_pyramid(image_of<T>(301, 77, 3, 2), {}, exec));
    for (int l = 1; l < pyr.num_levels(); ++l)
      EXPECT_EQ(pyr.level(l).plane(0), buffers[size_t(l - 1)]) << "level " << l << " was reallocated";

    // Writing into level 0 in place works the same.
    Image<T> next = image_of<T>(301, 77, 3, 3);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 77; ++y) std::memcpy(pyr.level(0).row(c, y), next.row(c, y), sizeof(T) * 301);
    rebuild_pyramid(pyr, {}, exec);
    expect_equal_pyramids(pyr, build_pyramid(std::move(next), {}, exec));

    // Another size and channel count: the levels follow, as build_pyramid's.
    pyr.level(0) = image_of<T>(64, 200, 1, 4);
    rebuild_pyramid(pyr, {}, exec);
    expect_equal_pyramids(pyr, build_pyramid(image_of<T>(64, 200, 1, 4), {}, exec));

    // Fewer levels asked for: the extra ones are dropped; more: added.
    rebuild_pyramid(pyr, {.max_levels = 3}, exec);
    expect_equal_pyramids(pyr, build_pyramid(image_of<T>(64, 200, 1, 4), {.max_levels = 3}, exec));
    rebuild_pyramid(pyr, {}, exec);
    expect_equal_pyramids(pyr, build_pyramid(image_of<T>(64, 200, 1, 4), {}, exec));
  }
}

TEST(PyramidRebuild, MatchesBuildAndReusesStorageU8) { rebuild_matches_build<uint8_t>(); }
TEST(PyramidRebuild, MatchesBuildAndReusesStorageF32) { rebuild_matches_build<float>(); }

TEST(PyramidRebuild, ReferenceKernelsToo) {
  Executor ref({.threads = 2, .kernels = Kernels::reference});
  Executor simd({.threads = 2});
  PyramidF32 pyr = build_pyramid(test::random_image_f32(130, 131, 3, 5), {}, ref);
  pyr.level(0) = test::random_image_f32(130, 131, 3, 6);
  rebuild_pyramid(pyr, {}, ref);
  expect_equal_pyramids(pyr, build_pyramid(test::random_image_f32(130, 131, 3, 6), {}, simd));
}

TEST(PyramidRebuild, Errors) {
  Executor exec({.threads = 1});
  PyramidU8 empty;
  EXPECT_THROW(rebuild_pyramid(empty, {}, exec), Error);
  PyramidU8 pyr = build_pyramid(test::random_image(16, 16, 3, 1), {}, exec);
  EXPECT_THROW(rebuild_pyramid(pyr, {.max_levels = -1}, exec), Error);
  pyr.level(0) = ImageU8();
  EXPECT_THROW(rebuild_pyramid(pyr, {}, exec), Error);
}

}  // namespace
}  // namespace fovea
