// Position embeddings: a token's row of the model's G×G table, read the way the model's own code
// resizes the table for a uniform grid of tokens of that token's size (F.interpolate to the patch
// grid, align_corners=False) and reads the token's cell. encoder_internal.hpp says which model
// uses which sampling; the fixtures (scripts/make_encoder_fixtures.py) check every kind against
// F.interpolate (Idefics3: a bucketized lookup, no resize).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "encoder/encoder_internal.hpp"

namespace fovea::encoder_detail {
namespace {

// PyTorch's cubic convolution weights (A = −0.75) for fractional offset t in [0, 1).
void cubic_weights(float t, float w[4]) {
  constexpr float A = -0.75f;
  auto c1 = [](float x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto c2 = [](float x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  w[0] = c2(t + 1);
  w[1] = c1(t);
  w[2] = c1(1 - t);
  w[3] = c2(2 - t);
}

// out[D] += the G×G grid sampled bicubically at grid coordinates (u, v), taps clamped (PyTorch's
// upsample_bicubic2d, A = −0.75).
void add_bicubic(const float* grid, int G, int64_t D, double u, double v, float* out) {
  const double fu = std::floor(u), fv = std::floor(v);
  float wx[4], wy[4];
  cubic_weights(float(u - fu), wx);
  cubic_weights(float(v - fv), wy);
  const int ix = int(fu), iy = int(fv);
  auto clampi = [G](int i) { return i < 0 ? 0 : (i >= G ? G - 1 : i); };
  // Rows first, then columns, as upsample_bicubic2d does.
  for (int j = 0; j < 4; ++j) {
    const int y = clampi(iy - 1 + j);
    const float* r[4];
    for (int i = 0; i < 4; ++i) r[i] = grid + (int64_t(y) * G + clampi(ix - 1 + i)) * D;
    for (int64_t d = 0; d < D; ++d)
      out[d] += wy[j] * (r[0][d] * wx[0] + r[1][d] * wx[1] + r[2][d] * wx[2] + r[3][d] * wx[3]);
  }
}

// The same, bilinear (PyTorch's linear modes: a coordinate below 0 is clamped to 0, the upper tap
// to G − 1).
void add_bilinear(const float* grid, int G, int64_t D, double u, double v, float* out) {
  u = std::max(u, 0.0), v = std::max(v, 0.0);
  const int x0 = std::min(int(u), G - 1), y0 = std::min(int(v), G - 1);
  const int x1 = std::min(x0 + 1, G - 1), y1 = std::min(y0 + 1, G - 1);
  const float lx = float(u - x0), ly = float(v - y0);
  const float w00 = (1 - ly) * (1 - lx), w01 = (1 - ly) * lx, w10 = ly * (1 - lx), w11 = ly * lx;
  const float* a = grid + (int64_t(y0) * G + x0) * D;
  const float* b = grid + (int64_t(y0) * G + x1) * D;
  const float* c = grid + (int64_t(y1) * G + x0) * D;
  const float* d = grid + (int64_t(y1) * G + x1) * D;
  for (int64_t k = 0; k < D; ++k) out[k] += w00 * a[k] + w01 * b[k] + w10 * c[k] + w11 * d[k];
}

// PyTorch's anti-aliasing filters (UpSampleKernel.cpp: the triangle, and Keys' cubic with
// a = −0.5 as PIL uses, not upsample_bicubic2d's −0.75).
double aa_filter(bool cubic, double x) {
  x = std::fabs(x);
  if (!cubic) return x < 1 ? 1 - x : 0;
  constexpr double a = -0.5;
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

// One axis of F.interpolate(antialias=True, align_corners=False) for an output cell centred at
// `center` table cells, `scale` table cells wide: the taps first..first + w.size() − 1 of an axis
// of `n` cells and their weights (PyTorch's _compute_weights_aa: support 1 or 2 cells, times
// the scale when shrinking; taps outside the table dropped; weights normalised to sum 1).
// `center` is clamped to the table (only a hostile position lies outside it), so there is
// always a tap; `scale` must be positive.
int aa_taps(bool cubic, double center, double scale, int n, std::vector<float>& w) {
  center = center >= 0 ? std::min(center, double(n)) : 0.0;  // NaN too (encode() refuses it first)
  const double support = (cubic ? 2.0 : 1.0) * std::max(scale, 1.0);
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  // int64_t(·) truncates toward zero as PyTorch's static_cast does; both ends are clamped to
  // the table before the cast, so a huge support cannot overflow it.
  const int first = int(std::max(int64_t(std::clamp(center - support + 0.5, 0.0, double(n))), int64_t(0)));
  const int last = int(std::min(int64_t(std::clamp(center + support + 0.5, 0.0, double(n))), int64_t(n)));
  w.resize(size_t(std::max(last - first, 0)));
  double total = 0;
  for (size_t j = 0; j < w.size(); ++j) {
    const double v = aa_filter(cubic, (double(first + int(j)) - center + 0.5) * invscale);
    w[j] = float(v);
    total += v;
  }
  if (total != 0)
    for (float& v : w) v = float(double(v) / total);
  return first;
}

// The distinct values of v (within a relative 1e-4), sorted.
std::vector<double> distinct(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::vector<double> out;
  for (double x : v)
    if (out.empty() || x - out.back() > 1e-4 * std::max(1.0, std::fabs(x))) out.push_back(x);
  return out;
}

// The spacing of sorted values that are evenly spaced (within 1e-3 of it), else 0.
double even_spacing(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double d = (v.back() - v.front()) / double(v.size() - 1);
  for (size_t i = 1; i < v.size(); ++i)
    if (std::fabs(v[i] - v[i - 1] - d) > 1e-3 * d) return 0;
  return d;
}

// Idefics3's cell along one axis for a token `cell` px wide whose left (top) edge is `edge` px
// into an image `extent` px wide: `torch.bucketize(i / n, arange(1/G, 1, 1/G), right=True)`,
// i.e. ⌊G·i/n⌋, the table cell its fractional coordinate falls in. Token i of a whole grid of n
// tokens of its size gets it in integers, exactly; another token ⌊G·edge/extent⌋. (Torch forms
// i/n in float32, which at an exact coincidence i/n = k/G can land one cell lower:
// docs/explanation/encoder.md.) Clamped to the table: only a token hanging over the image's edge lies outside.
int bucket(double edge, double extent, double cell, int G) {
  const double n = extent / cell, i = edge / cell, N = std::round(n), I = std::round(i);
  if (N >= 1 && N < 1e9 && std::fabs(n - N) < 1e-6 && std::fabs(i - I) < 1e-6 && I >= 0 && I < N)
    return int(std::min<int64_t>(int64_t(I) * G / int64_t(N), G - 1));
  const double f = std::floor(edge / extent * G + 1e-9);
  if (!(f >= 0)) return 0;  // NaN too (encode() refuses it first)
  return int(std::min(f, double(G - 1)));
}

}  // namespace

PositionSampler::PositionSampler(const VitConfig& c, const float* grid, int image_width, int image_height,
                                 const float* pos, int64_t n, int64_t cols)
    : mode_(c.pos_sampling),
      grid_(grid),
      G_(c.grid),
      D_(c.hidden),
      sx_(double(c.grid) / image_width),
      sy_(double(c.grid) / image_height),
      image_w_(image_width),
      image_h_(image_height) {
  // Only the antialiased and bucketized kinds read a token's extent. A lattice: n = gx·gy
  // distinct centres, evenly spaced on both axes (at least two columns and two rows), every
  // side equal.
  if (mode_ != PositionSampling::bicubic_antialias && mode_ != PositionSampling::bilinear_antialias &&
      mode_ != PositionSampling::bucketized)
    return;
  if (n < 4 || cols < 3) return;
  std::vector<double> xs(static_cast<size_t>(n)), ys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (pos[i * cols + 2] != pos[2]) return;
    xs[size_t(i)] = pos[i * cols], ys[size_t(i)] = pos[i * cols + 1];
  }
  const std::vector<double> ux = distinct(xs), uy = distinct(ys);
  if (int64_t(ux.size()) * int64_t(uy.size()) != n) return;
  std::vector<std::pair<double, double>> pairs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pairs[size_t(i)] = {xs[size_t(i)], ys[size_t(i)]};
  std::sort(pairs.begin(), pairs.end());
  for (size_t i = 1; i < pairs.size(); ++i)
    if (pairs[i] == pairs[i - 1]) return;  // a repeated centre: not every cell is there
  const double dx = even_spacing(ux), dy = even_spacing(uy);
  if (dx > 0 && dy > 0) cell_w_ = dx, cell_h_ = dy;
}

void PositionSampler::add(const float* pos, int64_t cols, float* out) const {
  const double cx = double(pos[0]) * sx_, cy = double(pos[1]) * sy_;  // table cells
  switch (mode_) {
    case PositionSampling::bicubic:
      add_bicubic(grid_, G_, D_, cx - 0.5, cy - 0.5, out);
      return;
    case PositionSampling::bilinear:
      add_bilinear(grid_, G_, D_, cx - 0.5, cy - 0.5, out);
      return;
    case PositionSampling::bicubic_antialias:
    case PositionSampling::bilinear_antialias:
      break;
    case PositionSampling::bucketized: {
      // The token's top-left corner: its centre less half its extent (the lattice's cell on
      // each axis, else its side; without a side, a patch of the table's own size).
      const bool sided = cols >= 3 && std::isfinite(pos[2]) && pos[2] > 0;
      double half_w = sided ? 0.5 * pos[2] : 0.5 / sx_, half_h = sided ? 0.5 * pos[2] : 0.5 / sy_;
      if (cell_w_ > 0) half_w = 0.5 * cell_w_, half_h = 0.5 * cell_h_;
      const int bx = bucket(double(pos[0]) - half_w, image_w_, 2 * half_w, G_);
      const int by = bucket(double(pos[1]) - half_h, image_h_, 2 * half_h, G_);
      const float* cell = grid_ + (int64_t(by) * G_ + bx) * D_;
      for (int64_t d = 0; d < D_; ++d) out[d] += cell[d];
      return;
    }
  }
  // A token `side` px wide spans side·sx table cells: the scale F.interpolate uses when the
  // table is resized to a grid of such tokens. Without a side column (or with a side that is
  // not a positive number) the token counts as one table cell, which for every size up to one
  // cell is what PyTorch does anyway (the kernel widens only when shrinking).
  const double side = cols >= 3 && std::isfinite(pos[2]) && pos[2] > 0 ? double(pos[2]) : 0.0;
  double scale_x = side > 0 ? side * sx_ : 1.0, scale_y = side > 0 ? side * sy_ : 1.0;
  if (cell_w_ > 0) scale_x = cell_w_ * sx_, scale_y = cell_h_ * sy_;  // a lattice: its cells, per axis
  const bool cubic = mode_ == PositionSampling::bicubic_antialias;
  thread_local std::vector<float> wx, wy, row;
  const int x0 = aa_taps(cubic, cx, scale_x, G_, wx);
  const int y0 = aa_taps(cubic, cy, scale_y, G_, wy);
  // Along x first (each table row's taps), then along y, as PyTorch's separable passes.
  row.assign(size_t(D_), 0.0f);
  for (size_t j = 0; j < wy.size(); ++j) {
    std::fill(row.begin(), row.end(), 0.0f);
    const float* r = grid_ + int64_t(y0 + int(j)) * G_ * D_;
    for (size_t i = 0; i < wx.size(); ++i) {
      const float* cell = r + int64_t(x0 + int(i)) * D_;
      const float w = wx[i];
      for (int64_t d = 0; d < D_; ++d) row[size_t(d)] += w * cell[d];
    }
    const float w = wy[j];
    for (int64_t d = 0; d < D_; ++d) out[d] += w * row[size_t(d)];
  }
}

}  // namespace fovea::encoder_detail
