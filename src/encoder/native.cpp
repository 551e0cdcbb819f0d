// The native-resolution towers' processor: smart_resize, PIL's bicubic resampling, the patch
// layout (patches of temporal_patch frames, merge unit by merge unit) and the language model's
// M-RoPE position ids.
#include "fovea/native.hpp"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fovea/error.hpp"

namespace fovea {

NativeSize smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels) {
  if (height < 1 || width < 1) throw invalid_argument("smart_resize: the image size must be positive");
  if (factor < 1 || min_pixels < 1 || max_pixels < min_pixels)
    throw invalid_argument("smart_resize: needs factor >= 1 and 1 <= min_pixels <= max_pixels (got min_pixels " +
                           std::to_string(min_pixels) + ", max_pixels " + std::to_string(max_pixels) + ")");
  const double h = height, w = width, f = factor;
  if (std::max(h, w) / std::min(h, w) > 200)
    throw invalid_argument("smart_resize: a " + std::to_string(width) + "x" + std::to_string(height) +
                           " image has an aspect ratio above 200, which the model's processor refuses");
  // Python's round(): halves to even, which nearbyint gives in the default rounding mode.
  double hb = std::nearbyint(h / f) * f, wb = std::nearbyint(w / f) * f;
  if (hb * wb > double(max_pixels)) {
    const double beta = std::sqrt(h * w / double(max_pixels));
    hb = std::max(f, std::floor(h / beta / f) * f);
    wb = std::max(f, std::floor(w / beta / f) * f);
  } else if (hb * wb < double(min_pixels)) {
    const double beta = std::sqrt(double(min_pixels) / (h * w));
    hb = std::ceil(h * beta / f) * f;
    wb = std::ceil(w * beta / f) * f;
  }
  if (!(hb >= 1 && wb >= 1 && hb < 1e9 && wb < 1e9))
    throw invalid_argument("smart_resize: the resized size is out of range");
  return {int(hb), int(wb)};
}

NativeSize smart_resize_video(int frames, int height, int width, int temporal_factor, int factor, int64_t min_pixels,
                              int64_t max_pixels) {
  if (height < 1 || width < 1) throw invalid_argument("smart_resize_video: the frame size must be positive");
  if (temporal_factor < 1 || factor < 1 || min_pixels < 1 || max_pixels < min_pixels)
    throw invalid_argument("smart_resize_video: needs temporal_factor >= 1, factor >= 1 and 1 <= min_pixels <= "
                           "max_pixels (got min_pixels " + std::to_string(min_pixels) + ", max_pixels " +
                           std::to_string(max_pixels) + ")");
  if (frames < temporal_factor)
    throw invalid_argument("smart_resize_video: " + std::to_string(frames) + " frame(s), fewer than the temporal patch (" +
                           std::to_string(temporal_factor) + "), which the model's video processor refuses");
  double h = height, w = width;
  const double f = factor;
  if (height < factor || width < factor) {  // Python: int(height * scale), truncated
    const double scale = std::max(f / h, f / w);
    h = std::trunc(h * scale), w = std::trunc(w * scale);
  }
  if (std::max(h, w) / std::min(h, w) > 200)
    throw invalid_argument("smart_resize_video: " + std::to_string(width) + "x" + std::to_string(height) +
                           " frames have an aspect ratio above 200, which the model's processor refuses");
  double hb = std::nearbyint(h / f) * f, wb = std::nearbyint(w / f) * f;
  const double tb = std::nearbyint(double(frames) / temporal_factor) * temporal_factor;
  const double volume = double(frames) * h * w;  // exact below 2^53
  if (tb * hb * wb > double(max_pixels)) {
    const double beta = std::sqrt(volume / double(max_pixels));
    hb = std::max(f, std::floor(h / beta / f) * f);
    wb = std::max(f, std::floor(w / beta / f) * f);
  } else if (tb * hb * wb < double(min_pixels)) {
    const double beta = std::sqrt(double(min_pixels) / volume);
    hb = std::ceil(h * beta / f) * f;
    wb = std::ceil(w * beta / f) * f;
  }
  if (!(hb >= 1 && wb >= 1 && hb < 1e9 && wb < 1e9))
    throw invalid_argument("smart_resize_video: the resized size is out of range");
  return {int(hb), int(wb)};
}

NativeSize native_video_size(const VitModel& model, int frames, int height, int width, const NativeParams& params) {
  const VitConfig& c = model.config();
  if (!c.native.enabled())
    throw invalid_argument("native_video_size: '" + model.source() + "' is not a native-resolution tower");
  if (frames < 1) throw invalid_argument("native_video_size: no frame");
  const int64_t mn = params.min_pixels > 0 ? params.min_pixels : c.native.video_min_pixels;
  int64_t mx = params.max_pixels > 0 ? params.max_pixels : std::max(c.native.video_max_pixels, mn);
  const int factor = c.native.factor(c.patch_px);
  if (!c.native.video_limits_over_frames) return smart_resize(height, width, factor, mn, mx);
  if (params.cap_pixels_per_frame) {  // qwen-vl-utils: at most 768 merge units a frame, at least 1.05·min
    const int64_t cap = int64_t(768) * factor * factor;
    const int64_t per_frame = std::max(std::min(cap, mx / frames), int64_t(double(mn) * 1.05));
    if (double(per_frame) * frames > 0x1p62) throw invalid_argument("native_video_size: the pixel limits are out of range");
    mx = per_frame * frames;
  }
  return smart_resize_video(frames, height, width, c.native.temporal_patch, factor, mn, mx);
}

namespace {

// Pillow's Resample.c, 8 bits per channel.
constexpr int kPrecisionBits = 32 - 8 - 2;

// Pillow's filters: bicubic (a = −0.5, support 2) and bilinear (the triangle, support 1).
double pil_filter(bool cubic, double x) {
  constexpr double a = -0.5;
  if (x < 0) x = -x;
  if (!cubic) return x < 1 ? 1 - x : 0;
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

struct Taps {
  std::vector<int> first, count;
  std::vector<int32_t> k;  // [out, ksize] fixed point
  int ksize = 0;
};

Taps precompute(int in, int out, bool cubic) {
  const double scale = double(in) / out;
  const double filterscale = std::max(scale, 1.0);
  const double support = (cubic ? 2.0 : 1.0) * filterscale;
  Taps t;
  t.ksize = int(std::ceil(support)) * 2 + 1;
  t.first.resize(size_t(out));
  t.count.resize(size_t(out));
  t.k.assign(size_t(out) * size_t(t.ksize), 0);
  std::vector<double> w(size_t(t.ksize));
  for (int xx = 0; xx < out; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);  // C's truncation, as Pillow
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in) xmax = in;
    xmax -= xmin;
    double ww = 0;
    for (int x = 0; x < xmax; ++x) {
      w[size_t(x)] = pil_filter(cubic, (x + xmin - center + 0.5) * ss);
      ww += w[size_t(x)];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[size_t(x)] / ww : w[size_t(x)];
      t.k[size_t(xx) * size_t(t.ksize) + size_t(x)] =
          v < 0 ? int32_t(-0.5 + v * (1 << kPrecisionBits)) : int32_t(0.5 + v * (1 << kPrecisionBits));
    }
    t.first[size_t(xx)] = xmin;
    t.count[size_t(xx)] = std::max(xmax, 0);
  }
  return t;
}

uint8_t clip8(int64_t v) {
  if (v >= (int64_t(1) << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return uint8_t(v >> kPrecisionBits);
}

// Pillow's Image.resize on 8-bit channels with the bicubic or the bilinear filter.
ImageU8 resize_pil(const ImageViewU8& image, int width, int height, bool cubic, const char* what) {
  image.check((std::string(what) + ": image").c_str());
  if (width < 1 || height < 1) throw invalid_argument(std::string(what) + ": the size must be positive");
  if (int64_t(width) * height > (int64_t(1) << 28))
    throw Error(Errc::limit_exceeded, std::string(what) + ": a " + std::to_string(width) + "x" + std::to_string(height) +
                                          " result is over 2^28 pixels");
  const int C = image.channels(), W = image.width(), H = image.height();
  // Horizontal pass (skipped when the width stays), then vertical.
  ImageU8 mid(width, H, C);
  if (width == W) {
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) mid.at(c, y, x) = image.at(c, y, x);
  } else {
    const Taps t = precompute(W, width, cubic);
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < width; ++x) {
          int64_t s = int64_t(1) << (kPrecisionBits - 1);
          const int32_t* k = &t.k[size_t(x) * size_t(t.ksize)];
          for (int i = 0; i < t.count[size_t(x)]; ++i) s += int64_t(image.at(c, y, t.first[size_t(x)] + i)) * k[i];
          mid.at(c, y, x) = clip8(s);
        }
  }
  if (height == H) return mid;
  ImageU8 out(width, height, C);
  const Taps t = precompute(H, height, cubic);
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < height; ++y) {
      const int32_t* k = &t.k[size_t(y) * size_t(t.ksize)];
      for (int x = 0; x < width; ++x) {
        int64_t s = int64_t(1) << (kPrecisionBits - 1);
        for (int i = 0; i < t.count[size_t(y)]; ++i) s += int64_t(mid.at(c, t.first[size_t(y)] + i, x)) * k[i];
        out.at(c, y, x) = clip8(s);
      }
    }
  return out;
}

}  // namespace

ImageU8 resize_bicubic_pil(const ImageViewU8& image, int width, int height) {
  return resize_pil(image, width, height, true, "resize_bicubic_pil");
}

ImageU8 resize_bilinear_pil(const ImageViewU8& image, int width, int height) {
  return resize_pil(image, width, height, false, "resize_bilinear_pil");
}

NativeInput native_input(const VitModel& model, std::span<const ImageViewU8> frames) {
  const VitConfig& c = model.config();
  if (!c.native.enabled()) throw invalid_argument("native_input: '" + model.source() + "' is not a native-resolution tower");
  if (frames.empty()) throw invalid_argument("native_input: no frame");
  const int P = c.patch_px, m = c.native.merge, T = c.native.temporal_patch, f = c.native.factor(P);
  const int W = frames[0].width(), H = frames[0].height();
  for (const ImageViewU8& v : frames) {
    v.check("native_input: frame");
    if (v.channels() != 3) throw invalid_argument("native_input: frames must be RGB");
    if (v.width() != W || v.height() != H) throw invalid_argument("native_input: the frames differ in size");
  }
  if (W % f || H % f)
    throw invalid_argument("native_input: a " + std::to_string(W) + "x" + std::to_string(H) +
                           " image's sides are not multiples of " + std::to_string(f) +
                           " (patch × merge): resize it with smart_resize first (prepare_native does)");
  NativeInput in;
  in.grid = {int((frames.size() + size_t(T) - 1) / size_t(T)), H / P, W / P};
  const int64_t N = in.grid.patches(), K = int64_t(3) * T * P * P;
  if (N > (int64_t(1) << 20)) throw Error(Errc::limit_exceeded, "native_input: more than 2^20 patches");
  in.patches = Tensor(DType::f32, {N, K});
  float* out = in.patches.data<float>();
  const Normalization norm = normalization(c.input);
  float scale[3], shift[3];
  for (int ch = 0; ch < 3; ++ch) {  // (v/255 − mean)/std
    scale[ch] = 1.0f / (255.0f * norm.std[ch]);
    shift[ch] = -norm.mean[ch] / norm.std[ch];
  }
  const int gh = H / P, gw = W / P;
  int64_t row = 0;
  for (int t = 0; t < in.grid.t; ++t)
    for (int by = 0; by < gh / m; ++by)
      for (int bx = 0; bx < gw / m; ++bx)
        for (int my = 0; my < m; ++my)
          for (int mx = 0; mx < m; ++mx, ++row) {
            const int py = (by * m + my) * P, px = (bx * m + mx) * P;
            float* o = out + row * K;
            for (int ch = 0; ch < 3; ++ch)
              for (int k = 0; k < T; ++k) {
                const size_t fi = std::min(size_t(t) * size_t(T) + size_t(k), frames.size() - 1);
                const ImageViewU8& fr = frames[fi];
                for (int y = 0; y < P; ++y)
                  for (int x = 0; x < P; ++x)
                    *o++ = float(fr.at(ch, py + y, px + x)) * scale[ch] + shift[ch];
              }
          }
  return in;
}

NativeInput prepare_native(const VitModel& model, const ImageViewU8& image, const NativeParams& params, Executor& exec) {
  const VitConfig& c = model.config();
  if (!c.native.enabled()) throw invalid_argument("prepare_native: '" + model.source() + "' is not a native-resolution tower");
  image.check("prepare_native: image");
  const int64_t mn = params.min_pixels > 0 ? params.min_pixels : c.native.min_pixels;
  const int64_t mx = params.max_pixels > 0 ? params.max_pixels : std::max(c.native.max_pixels, mn);
  const NativeSize s = smart_resize(image.height(), image.width(), c.native.factor(c.patch_px), mn, mx);
  if (s.width == image.width() && s.height == image.height()) return native_input(model, {&image, 1});
  const ImageU8 r = resize_bicubic_pil(image, s.width, s.height);
  const ImageViewU8 v(r);
  (void)exec;
  return native_input(model, {&v, 1});
}

NativeInput prepare_native_video(const VitModel& model, std::span<const ImageViewU8> frames, double fps,
                                 const NativeParams& params, Executor& exec) {
  const VitConfig& c = model.config();
  if (!c.native.enabled())
    throw invalid_argument("prepare_native_video: '" + model.source() + "' is not a native-resolution tower");
  if (frames.empty()) throw invalid_argument("prepare_native_video: no frame");
  if (!(fps > 0) || !std::isfinite(fps)) throw invalid_argument("prepare_native_video: fps must be positive");
  for (const ImageViewU8& f : frames) {
    f.check("prepare_native_video: frame");
    if (f.width() != frames[0].width() || f.height() != frames[0].height())
      throw invalid_argument("prepare_native_video: the frames differ in size");
  }
  const NativeSize s = native_video_size(model, int(std::min<size_t>(frames.size(), 1 << 30)), frames[0].height(),
                                         frames[0].width(), params);
  std::vector<ImageU8> resized;
  std::vector<ImageViewU8> views;
  if (s.width != frames[0].width() || s.height != frames[0].height()) {
    for (const ImageViewU8& f : frames) resized.push_back(resize_bicubic_pil(f, s.width, s.height));
    for (const ImageU8& r : resized) views.emplace_back(r);
  } else {
    views.assign(frames.begin(), frames.end());
  }
  (void)exec;
  NativeInput in = native_input(model, views);
  in.fps = fps;
  return in;
}

Tensor native_mrope_positions(std::span<const NativeGrid> grids, int merge, double temporal_step) {
  if (merge < 1) throw invalid_argument("native_mrope_positions: merge must be >= 1");
  int64_t M = 0;
  for (const NativeGrid& g : grids) {
    if (g.t < 1 || g.h < merge || g.w < merge || g.h % merge || g.w % merge)
      throw invalid_argument("native_mrope_positions: every grid needs t >= 1 and sides that are positive multiples of merge");
    M += g.merged(merge);
  }
  Tensor out(DType::i32, {M, 3});
  int32_t* p = out.data<int32_t>();
  int64_t start = 0;
  for (const NativeGrid& g : grids) {
    const int lh = g.h / merge, lw = g.w / merge;
    int64_t largest = 0;
    for (int t = 0; t < g.t; ++t) {
      const int64_t tt = int64_t(double(t) * temporal_step);
      for (int y = 0; y < lh; ++y)
        for (int x = 0; x < lw; ++x) {
          *p++ = int32_t(start + tt), *p++ = int32_t(start + y), *p++ = int32_t(start + x);
          largest = std::max({largest, tt, int64_t(y), int64_t(x)});
        }
    }
    start += largest + 1;
  }
  return out;
}

}  // namespace fovea
