// The native-resolution towers' foveation: a base view at a low pixel budget and full-resolution
// windows, each a native image of its own (fovea/native.hpp); for SigLIP 2 NaFlex too (a token is
// a patch there).
#include <algorithm>
#include <cmath>
#include <string>

#include "fovea/error.hpp"
#include "fovea/native.hpp"

namespace fovea {

int64_t NativeWindowPlan::tokens(int merge) const {
  int64_t n = 0;
  for (const NativeWindow& w : windows) n += w.grid.merged(merge);
  return n;
}

namespace {

struct Focus {
  double x, y;
};

bool inside(const NativeWindow& w, double x, double y) {
  return x >= w.box[0] && x < w.box[2] && y >= w.box[1] && y < w.box[3];
}

}  // namespace

NativeWindowPlan plan_native_windows(const VitModel& model, int width, int height, const Query& query,
                                     const RelevanceMap* relevance, const NativeWindowParams& params) {
  const VitConfig& c = model.config();
  const bool naflex = c.native.naflex();
  if (!c.native.enabled() && !naflex)
    throw invalid_argument("plan_native_windows: '" + model.source() + "' is not a native-resolution tower");
  if (width < 1 || height < 1) throw invalid_argument("plan_native_windows: the image size must be positive");
  if (params.budget_tokens < 4 || params.budget_tokens > (1 << 22))
    throw invalid_argument("plan_native_windows: budget_tokens must be 4..2^22 merged tokens");
  if (!(params.base_share > 0 && params.base_share <= 1))
    throw invalid_argument("plan_native_windows: base_share must be in (0, 1]");
  if (params.max_windows < 0 || params.max_windows > 64)
    throw invalid_argument("plan_native_windows: max_windows must be 0..64");
  // SigLIP 2 NaFlex: no merge, a token is a patch.
  const int P = c.patch_px, m = naflex ? 1 : c.native.merge, f = naflex ? P : c.native.factor(P);
  NativeWindowPlan plan;
  plan.image_width = width, plan.image_height = height;

  // Base view: smart_resize within base tokens · f² pixels (NaFlex: naflex_size to base tokens).
  const int64_t base_budget = std::max<int64_t>(1, int64_t(std::floor(params.budget_tokens * params.base_share)));
  const int64_t min_px = std::min<int64_t>(c.native.min_pixels, base_budget * f * f);
  const NativeSize s = naflex ? naflex_size(height, width, P, int(base_budget))
                              : smart_resize(height, width, f, min_px, base_budget * int64_t(f) * f);
  NativeWindow base;
  base.box = {0, 0, width, height};
  base.grid = {1, s.height / P, s.width / P};
  base.kind = TokenWindow::Kind::base;
  plan.windows.push_back(base);
  int64_t left = params.budget_tokens - base.grid.merged(m);

  // A full-resolution window of about `tokens` merged tokens centred on (x, y), clamped into the image.
  const int units_x = width / f, units_y = height / f;  // whole merge units the image holds
  auto place = [&](double x, double y, int64_t tokens, TokenWindow::Kind kind) -> bool {
    if (tokens < 1 || units_x < 1 || units_y < 1 || int(plan.windows.size()) > params.max_windows) return false;
    int sx = std::max(1, int(std::floor(std::sqrt(double(tokens)))));
    int sy = sx;
    sx = std::min(sx, units_x), sy = std::min(sy, units_y);
    // A side the image cuts short gives its share to the other.
    if (sx < sy) sy = int(std::min<int64_t>(units_y, tokens / sx));
    else if (sy < sx) sx = int(std::min<int64_t>(units_x, tokens / sy));
    if (int64_t(sx) * sy > tokens || sx < 1 || sy < 1) return false;
    const int w = sx * f, h = sy * f;
    const int x0 = std::clamp(int(std::lround(x - w / 2.0)), 0, width - w);
    const int y0 = std::clamp(int(std::lround(y - h / 2.0)), 0, height - h);
    NativeWindow win;
    win.box = {x0, y0, x0 + w, y0 + h};
    win.grid = {1, h / P, w / P};
    win.kind = kind;
    plan.windows.push_back(win);
    left -= win.grid.merged(m);
    return true;
  };

  std::vector<Focus> foci;
  for (const Fixation& fx : query.fixations) {
    if (!std::isfinite(fx.x_px) || !std::isfinite(fx.y_px))
      throw invalid_argument("plan_native_windows: a fixation is not finite");
    foci.push_back({std::clamp<double>(fx.x_px, 0, width - 1), std::clamp<double>(fx.y_px, 0, height - 1)});
  }
  for (const Region& r : query.regions) {
    if (!std::isfinite(r.x0_px) || !std::isfinite(r.y0_px) || !std::isfinite(r.x1_px) || !std::isfinite(r.y1_px))
      throw invalid_argument("plan_native_windows: a region is not finite");
    foci.push_back({std::clamp<double>((r.x0_px + r.x1_px) / 2, 0, width - 1),
                    std::clamp<double>((r.y0_px + r.y1_px) / 2, 0, height - 1)});
  }
  if (!foci.empty()) {
    const int64_t n = std::min<int64_t>(int64_t(foci.size()), params.max_windows);
    const int64_t share = n > 0 ? left / n : 0;
    for (const Focus& fo : foci) {
      bool covered = false;
      for (size_t i = 1; i < plan.windows.size(); ++i) covered = covered || inside(plan.windows[i], fo.x, fo.y);
      if (!covered) place(fo.x, fo.y, std::min(share, left), TokenWindow::Kind::query);
    }
  } else if (relevance && !relevance->score.empty()) {
    // The best tiles first, a window each, while the budget lasts.
    const TileGrid& g = relevance->grid;
    std::vector<int64_t> order(relevance->score.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return relevance->score[size_t(a)] > relevance->score[size_t(b)]; });
    const int64_t per = std::max<int64_t>(left / std::max(1, std::min(params.max_windows, 4)), 1);
    for (int64_t t : order) {
      if (left < 1 || int(plan.windows.size()) > params.max_windows) break;
      const double x = (double(t % g.tiles_x) + 0.5) * g.patch_px * double(width) / (double(g.tiles_x) * g.patch_px);
      const double y = (double(t / g.tiles_x) + 0.5) * g.patch_px * double(height) / (double(g.tiles_y) * g.patch_px);
      bool covered = false;
      for (size_t i = 1; i < plan.windows.size(); ++i) covered = covered || inside(plan.windows[i], x, y);
      if (!covered && !place(x, y, std::min(per, left), TokenWindow::Kind::detail)) break;
    }
  }
  return plan;
}

std::vector<NativeInput> native_window_inputs(const VitModel& model, const ImageViewU8& image,
                                              const NativeWindowPlan& plan) {
  image.check("native_window_inputs: image");
  if (image.width() != plan.image_width || image.height() != plan.image_height)
    throw invalid_argument("native_window_inputs: the image is not the plan's size");
  const int P = model.config().patch_px;
  std::vector<NativeInput> out;
  for (const NativeWindow& w : plan.windows) {
    if (w.kind == TokenWindow::Kind::base) {
      const ImageU8 r = resize_bicubic_pil(image, w.grid.w * P, w.grid.h * P);
      const ImageViewU8 v(r);
      out.push_back(native_input(model, {&v, 1}));
      continue;
    }
    const auto [x0, y0, x1, y1] = w.box;
    if (x0 < 0 || y0 < 0 || x1 > image.width() || y1 > image.height() || x1 - x0 != w.grid.w * P ||
        y1 - y0 != w.grid.h * P)
      throw invalid_argument("native_window_inputs: a window lies outside the image or does not match its grid");
    const ImageViewU8 crop(image.row(0, y0) + ptrdiff_t(x0) * image.pixel_stride(), x1 - x0, y1 - y0, image.channels(),
                           image.pixel_stride(), image.row_stride(), image.channel_stride());
    out.push_back(native_input(model, {&crop, 1}));
  }
  return out;
}

std::vector<NaflexInput> naflex_window_inputs(const VitModel& model, const ImageViewU8& image,
                                              const NativeWindowPlan& plan) {
  image.check("naflex_window_inputs: image");
  if (!model.config().native.naflex())
    throw invalid_argument("naflex_window_inputs: '" + model.source() + "' is not a SigLIP 2 NaFlex tower");
  if (image.width() != plan.image_width || image.height() != plan.image_height)
    throw invalid_argument("naflex_window_inputs: the image is not the plan's size");
  const int P = model.config().patch_px;
  std::vector<NaflexInput> out;
  for (const NativeWindow& w : plan.windows) {
    if (w.kind == TokenWindow::Kind::base) {
      out.push_back(naflex_input(model, resize_bilinear_pil(image, w.grid.w * P, w.grid.h * P)));
      continue;
    }
    const auto [x0, y0, x1, y1] = w.box;
    if (x0 < 0 || y0 < 0 || x1 > image.width() || y1 > image.height() || x1 - x0 != w.grid.w * P ||
        y1 - y0 != w.grid.h * P)
      throw invalid_argument("naflex_window_inputs: a window lies outside the image or does not match its grid");
    const ImageViewU8 crop(image.row(0, y0) + ptrdiff_t(x0) * image.pixel_stride(), x1 - x0, y1 - y0, image.channels(),
                           image.pixel_stride(), image.row_stride(), image.channel_stride());
    out.push_back(naflex_input(model, crop));
  }
  return out;
}

}  // namespace fovea
