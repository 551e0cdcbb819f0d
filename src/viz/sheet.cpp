// VideoSheet (viz.hpp): a bounded, evenly spaced contact sheet of a video run's token layouts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "fovea/viz.hpp"

namespace fovea {

namespace {

// A 3×5 bitmap font for the captions: each glyph is 5 rows of 3 bits (bit 2 = left column).
const uint8_t* glyph(char ch) {
  static const uint8_t kDigits[10][5] = {{7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7},
                                         {5, 5, 7, 1, 1}, {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1},
                                         {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7}};
  static const uint8_t kDot[5] = {0, 0, 0, 0, 2}, kSlash[5] = {1, 1, 2, 4, 4},
                       kS[5] = {0, 3, 4, 1, 6}, kR[5] = {6, 5, 6, 5, 5}, kMinus[5] = {0, 0, 7, 0, 0},
                       kBlank[5] = {0, 0, 0, 0, 0};
  if (ch >= '0' && ch <= '9') return kDigits[ch - '0'];
  switch (ch) {
    case '.': return kDot;
    case '/': return kSlash;
    case 's': return kS;
    case 'R': return kR;
    case '-': return kMinus;
    default: return kBlank;
  }
}

constexpr int kGlyphScale = 2, kAdvance = 4 * kGlyphScale, kCaption = 7 * kGlyphScale, kGap = 4;

void draw_text(ImageU8& img, int x, int y, const std::string& s, const uint8_t rgb[3]) {
  for (char ch : s) {
    const uint8_t* g = glyph(ch);
    for (int r = 0; r < 5 * kGlyphScale; ++r)
      for (int col = 0; col < 3 * kGlyphScale; ++col) {
        if (!((g[r / kGlyphScale] >> (2 - col / kGlyphScale)) & 1)) continue;
        const int px = x + col, py = y + r;
        if (px < 0 || py < 0 || px >= img.width() || py >= img.height()) continue;
        for (int c = 0; c < 3; ++c) img.at(c, py, px) = rgb[c];
      }
    x += kAdvance;
  }
}

}  // namespace

VideoSheet::VideoSheet(int cells, int thumb_width) : cells_(std::max(1, cells)), thumb_width_(std::max(16, thumb_width)) {}

bool VideoSheet::wants(int64_t n) const { return n >= 0 && n % stride_ == 0; }

int64_t VideoSheet::kept() const { return int64_t(kept_.size()); }

void VideoSheet::decimate() {
  std::erase_if(kept_, [&](const Cell& c) { return c.n % (2 * stride_) != 0; });
  stride_ *= 2;
}

void VideoSheet::add_frame(int64_t n, const ImageViewU8& frame, int64_t index, double pts_s, Executor& exec) {
  if (!wants(n) || frame.width() < 1 || frame.height() < 1) return;
  // Fit the frame in a thumb_width square (a 3×4096 frame must not make a 436906-pixel-tall cell).
  const float scale = std::min(float(thumb_width_) / float(frame.width()), float(thumb_width_) / float(frame.height()));
  const int w = std::max(1, int(std::lround(frame.width() * scale)));
  const int h = std::max(1, int(std::lround(frame.height() * scale)));
  const ImageU8 small = resize_area(frame, w, h, exec);
  Cell cell;
  cell.n = n, cell.index = index, cell.pts_s = pts_s, cell.scale = scale;
  cell.thumb = ImageU8(w, h, 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const float gray = small.channels() >= 3
                             ? 0.299f * small.at(0, y, x) + 0.587f * small.at(1, y, x) + 0.114f * small.at(2, y, x)
                             : float(small.at(0, y, x));
      // Darkened so that the borders and the tint stand out.
      for (int c = 0; c < 3; ++c) cell.thumb.at(c, y, x) = uint8_t(std::lround(0.75f * gray));
    }
  kept_.push_back(std::move(cell));
  if (kept_.size() >= size_t(2 * cells_)) decimate();
}

void VideoSheet::add_tokens(int64_t n, const TokenBatch& batch, const std::vector<uint8_t>& recomputed, bool refresh) {
  auto it = std::find_if(kept_.begin(), kept_.end(), [&](const Cell& c) { return c.n == n; });
  if (it == kept_.end() || it->drawn) return;
  Cell& cell = *it;
  ImageU8& img = cell.thumb;
  const int W = img.width(), H = img.height();
  const int64_t count = int64_t(batch.boxes.size());
  const int32_t* levels = batch.levels.numel() == count ? batch.levels.data<int32_t>() : nullptr;
  auto px = [&](float v, int limit) { return std::clamp(int(std::lround(v * cell.scale)), 0, limit); };
  // Tint first, borders over it.
  for (int64_t i = 0; i < count && i < int64_t(recomputed.size()); ++i) {
    if (!recomputed[size_t(i)]) continue;
    const auto& b = batch.boxes[size_t(i)];
    const int x0 = px(b[0], W), y0 = px(b[1], H), x1 = px(b[2], W), y1 = px(b[3], H);
    static const uint8_t kTint[3] = {255, 0, 255};
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x)
        for (int c = 0; c < 3; ++c) img.at(c, y, x) = uint8_t((img.at(c, y, x) + kTint[c]) / 2);
  }
  for (int64_t i = 0; i < count; ++i) {
    const auto& b = batch.boxes[size_t(i)];
    uint8_t col[3];
    level_colour(levels ? levels[i] : 0, col);
    const int x0 = px(b[0], W - 1), y0 = px(b[1], H - 1);
    const int x1 = std::max(x0, px(b[2], W) - 1), y1 = std::max(y0, px(b[3], H) - 1);
    for (int c = 0; c < 3; ++c) {
      for (int x = x0; x <= x1; ++x) img.at(c, y0, x) = col[c], img.at(c, y1, x) = col[c];
      for (int y = y0; y <= y1; ++y) img.at(c, y, x0) = col[c], img.at(c, y, x1) = col[c];
    }
  }
  cell.tokens = count;
  cell.recomputed = 0;
  for (int64_t i = 0; i < count && i < int64_t(recomputed.size()); ++i) cell.recomputed += recomputed[size_t(i)] ? 1 : 0;
  cell.refresh = refresh;
  cell.drawn = true;
}

std::vector<const VideoSheet::Cell*> VideoSheet::shown() const {
  std::vector<const Cell*> ready, out;
  for (const Cell& c : kept_)
    if (c.drawn) ready.push_back(&c);
  // At most `cells`, evenly spread over what was kept.
  const size_t m = std::min(ready.size(), size_t(cells_));
  for (size_t i = 0; i < m; ++i) out.push_back(ready[i * ready.size() / m]);
  return out;
}

std::vector<int64_t> VideoSheet::shown_frames() const {
  std::vector<int64_t> out;
  for (const Cell* c : shown()) out.push_back(c->index);
  return out;
}

ImageU8 VideoSheet::render() const {
  const std::vector<const Cell*> shown = this->shown();
  if (shown.empty()) return {};
  const int cols = int(std::min<size_t>(4, shown.size()));
  const int rows = int((shown.size() + size_t(cols) - 1) / size_t(cols));
  int cw = 0, ch = 0;
  for (const Cell* c : shown) cw = std::max(cw, c->thumb.width()), ch = std::max(ch, c->thumb.height());
  // Wide enough for the longest caption too.
  cw = std::max(cw, 24 * kAdvance);
  const int cell_w = cw + kGap, cell_h = ch + kCaption + kGap;
  ImageU8 out(cols * cell_w + kGap, rows * cell_h + kGap, 3);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < out.height(); ++y) std::fill_n(out.row(c, y), out.width(), uint8_t(24));
  for (size_t k = 0; k < shown.size(); ++k) {
    const Cell& cell = *shown[k];
    const int ox = kGap + int(k % size_t(cols)) * cell_w, oy = kGap + int(k / size_t(cols)) * cell_h;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < cell.thumb.height(); ++y)
        std::copy_n(cell.thumb.row(c, y), cell.thumb.width(), out.row(c, oy + y) + ox);
    char text[96];
    std::snprintf(text, sizeof text, "%lld %.2fs %s%lld/%lld", static_cast<long long>(cell.index), cell.pts_s,
                  cell.refresh ? "R " : "", static_cast<long long>(cell.recomputed), static_cast<long long>(cell.tokens));
    static const uint8_t kWhite[3] = {235, 235, 235}, kMagenta[3] = {255, 90, 255};
    draw_text(out, ox, oy + cell.thumb.height() + kGlyphScale, text, cell.refresh ? kMagenta : kWhite);
  }
  return out;
}

}  // namespace fovea
