// Comparisons of fovea's outputs with the float64 PyTorch references that the fixture scripts
// (scripts/make_*_fixtures.py) save next to each checkpoint: the native-resolution towers'
// tests and the NaFlex ones read the same kind of file and judge it the same way.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "fovea/image.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tensor.hpp"

namespace fovea::test {

// The reference tensor `name` of a cases file (a failure, and an empty tensor, when it is missing).
inline Tensor ref(const SafetensorsFile& f, const std::string& name) {
  const auto* e = f.find(name);
  EXPECT_NE(e, nullptr) << name;
  return e ? f.load(*e) : Tensor();
}

// max |a − b| / max |b| over every value of two f32 tensors; infinite (and a failure) when the
// shapes differ, infinite when they are empty.
inline double rel_err(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape() || a.numel() == 0) return INFINITY;
  double err = 0, mx = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    err = std::max(err, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
    mx = std::max(mx, double(std::fabs(b.data<float>()[i])));
  }
  return err / mx;
}

// How many channel values of `got` differ from `want` (same size; PIL's resizes are matched to
// the value, so the tests expect 0).
inline int64_t values_differing(const ImageU8& got, const ImageU8& want) {
  EXPECT_EQ(got.width(), want.width());
  EXPECT_EQ(got.height(), want.height());
  if (got.width() != want.width() || got.height() != want.height()) return INT64_MAX;
  int64_t differ = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < want.height(); ++y)
      for (int x = 0; x < want.width(); ++x) differ += got.at(c, y, x) != want.at(c, y, x);
  return differ;
}

}  // namespace fovea::test
