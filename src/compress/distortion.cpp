// Rate–distortion measures: cosine, relative MSE, nearest-neighbour agreement (FAISS flat
// inner-product search over unit vectors).
#include <algorithm>
#include <cmath>
#include <vector>

#include <faiss/IndexFlat.h>

#include "compress/compress_internal.hpp"
#include "fovea/compress.hpp"
#include "fovea/error.hpp"

namespace fovea {
namespace {

// The nearest other token of every row, by cosine.
std::vector<int64_t> nearest_other(const float* x, int64_t n, int64_t dim) {
  std::vector<float> unit(x, x + n * dim);
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t d = 0; d < dim; ++d) s += double(unit[size_t(i * dim + d)]) * unit[size_t(i * dim + d)];
    const float inv = s > 0 ? float(1 / std::sqrt(s)) : 0.f;
    for (int64_t d = 0; d < dim; ++d) unit[size_t(i * dim + d)] *= inv;
  }
  faiss::IndexFlatIP index(dim);
  index.add(n, unit.data());
  std::vector<float> dist(size_t(2 * n));
  std::vector<faiss::Index::idx_t> ids(size_t(2 * n));
  index.search(n, unit.data(), 2, dist.data(), ids.data());
  std::vector<int64_t> out(static_cast<size_t>(n));
  // The top hit is usually the row itself; with duplicates it may be its twin, which is then
  // the nearest other token.
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = ids[size_t(2 * i)] == i ? ids[size_t(2 * i + 1)] : ids[size_t(2 * i)];
  return out;
}

}  // namespace

Distortion measure_distortion(const Tensor& original, const Tensor& decoded, int threads) {
  const compress::OmpThreads omp(threads);
  if (original.dtype() != DType::f32 || decoded.dtype() != DType::f32 || original.rank() != 2 ||
      original.shape() != decoded.shape())
    throw Error(Errc::invalid_argument, "distortion: original and decoded must be [N, D] F32 of the same shape");
  const int64_t n = original.dim(0), dim = original.dim(1);
  Distortion r;
  if (n == 0) return r;
  const float* a = original.data<float>();
  const float* b = decoded.data<float>();
  double sum_cos = 0, min_cos = 1, err = 0, energy = 0;
  for (int64_t i = 0; i < n; ++i) {
    double ab = 0, aa = 0, bb = 0, e = 0;
    for (int64_t d = 0; d < dim; ++d) {
      const double x = a[i * dim + d], y = b[i * dim + d];
      ab += x * y;
      aa += x * x;
      bb += y * y;
      e += (x - y) * (x - y);
    }
    const double c = aa == 0 && bb == 0 ? 1 : (aa == 0 || bb == 0 ? 0 : ab / std::sqrt(aa * bb));
    sum_cos += c;
    min_cos = std::min(min_cos, c);
    err += e;
    energy += aa;
  }
  r.mean_cosine = sum_cos / double(n);
  r.min_cosine = min_cos;
  r.relative_mse = energy > 0 ? err / energy : 0;
  if (n >= 2) {
    const std::vector<int64_t> na = nearest_other(a, n, dim), nb = nearest_other(b, n, dim);
    int64_t same = 0;
    for (int64_t i = 0; i < n; ++i) same += na[size_t(i)] == nb[size_t(i)];
    r.nn_agreement = double(same) / double(n);
  } else {
    r.nn_agreement = 1;
  }
  return r;
}

}  // namespace fovea
