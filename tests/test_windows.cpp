// The windows foveation: where windows go, what they cover, the patches they cut, the files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/windows.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

Tokenization windows(const ImageU8& img, int budget, const Query& q = {}, int grid = 14, int P = 16,
                     DType dtype = DType::f32, bool keep_covered = false) {
  Executor exec({.threads = 2});
  TokenizeParams p;
  p.patch_px = P;
  p.foveation = Foveation::windows;
  p.windows.grid = grid;
  p.windows.keep_covered = keep_covered;
  p.alloc.budget_tokens = budget;
  p.extract.dtype = dtype;
  return tokenize(img.clone(), q, p, exec);
}

Query fixation(float x, float y) {
  Query q;
  q.fixations.push_back({.x_px = x, .y_px = y});
  return q;
}

bool inside(const std::array<float, 4>& b, const std::array<float, 4>& o) {
  return b[0] >= o[0] - 1e-3f && b[1] >= o[1] - 1e-3f && b[2] <= o[2] + 1e-3f && b[3] <= o[3] + 1e-3f;
}

// The invariants every plan keeps, checked on its batch.
void check_plan(const Tokenization& t, int budget, int grid, const std::string& what) {
  SCOPED_TRACE(what);
  const TokenBatch& b = t.batch;
  ASSERT_TRUE(b.windowed());
  ASSERT_TRUE(t.is_windowed());
  const int W = t.pyramid.width(), H = t.pyramid.height(), P = b.patch_px;
  EXPECT_LE(b.kept(), budget);
  EXPECT_EQ(b.kept(), t.windows->kept_tokens());
  EXPECT_EQ(b.size(), t.windows->encoded_tokens());
  EXPECT_EQ(b.windows.front().kind, TokenWindow::Kind::base);
  int64_t row = 0;
  for (size_t w = 0; w < b.windows.size(); ++w) {
    const TokenWindow& win = b.windows[w];
    EXPECT_GE(win.box[0], 0);
    EXPECT_GE(win.box[1], 0);
    EXPECT_LE(win.box[2], W);
    EXPECT_LE(win.box[3], H);
    if (w == 0) {
      EXPECT_EQ(win.level, -1);
      EXPECT_EQ(win.box, (std::array<float, 4>{0, 0, float(W), float(H)}));
    } else if (win.grid_x != grid || win.grid_y != grid) {
      // A strip (no query): level 0, at most the native grid on each side, on the tile lattice.
      EXPECT_EQ(win.level, 0);
      EXPECT_EQ(win.kind, TokenWindow::Kind::detail);
      EXPECT_LE(win.grid_x, grid);
      EXPECT_LE(win.grid_y, grid);
      EXPECT_FLOAT_EQ(win.box[2] - win.box[0], float(win.grid_x * P));
      EXPECT_FLOAT_EQ(win.box[3] - win.box[1], float(win.grid_y * P));
      EXPECT_EQ(int(win.box[0]) % P, 0);
      EXPECT_EQ(int(win.box[1]) % P, 0);
      EXPECT_LT(win.scale, b.windows.front().scale);
    } else {
      // A native window of mip level ℓ: G·P·2^ℓ pixels square, on the 2^ℓ lattice.
      ASSERT_GE(win.level, 0);
      EXPECT_FLOAT_EQ(win.box[2] - win.box[0], float(grid * P << win.level));
      EXPECT_FLOAT_EQ(win.box[3] - win.box[1], float(grid * P << win.level));
      EXPECT_EQ(int(win.box[0]) % (1 << win.level), 0);
      EXPECT_EQ(int(win.box[1]) % (1 << win.level), 0);
      EXPECT_LT(win.scale, b.windows.front().scale);
    }
    for (int64_t i = 0; i < win.tokens(); ++i, ++row) {
      ASSERT_EQ(b.window.data<int32_t>()[row], int32_t(w));
      EXPECT_TRUE(inside(b.boxes[row], win.box));
      if (!b.covered.data<uint8_t>()[row]) continue;
      // A covered token lies wholly inside a finer window (or an as fine one placed before).
      bool in_finer = false;
      for (size_t o = 0; o < b.windows.size(); ++o)
        if (o != w && (b.windows[o].scale < win.scale || (b.windows[o].scale == win.scale && o < w)) &&
            inside(b.boxes[row], b.windows[o].box))
          in_finer = true;
      EXPECT_TRUE(in_finer) << "token " << row << " of window " << w;
    }
  }
  EXPECT_EQ(row, b.size());
}

TEST(Windows, ParseFoveation) {
  EXPECT_EQ(parse_foveation("windows"), Foveation::windows);
  EXPECT_EQ(parse_foveation("mixed"), Foveation::mixed);
  EXPECT_EQ(to_string(Foveation::windows), "windows");
  try {
    parse_foveation("foveated");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'windows'"), std::string::npos) << e.what();
  }
}

TEST(Windows, BelowOneNativeViewTheBaseViewShrinks) {
  const ImageU8 img = test::random_image(448, 448, 3, 3);
  const Tokenization t = windows(img, 100);
  ASSERT_EQ(t.batch.windows.size(), 1u);
  EXPECT_EQ(t.batch.windows[0].grid_x, 10);  // floor(sqrt(100))
  EXPECT_EQ(t.batch.size(), 100);
  check_plan(t, 100, 14, "budget 100");
  // One native view and not enough for a window more: the base view alone.
  const Tokenization u = windows(img, 300, fixation(200, 200));
  ASSERT_EQ(u.batch.windows.size(), 1u);
  EXPECT_EQ(u.batch.size(), 196);
}

TEST(Windows, QueryWindowIsCentredOnTheFixationAndClampedIntoTheImage) {
  const ImageU8 img = test::random_image(896, 640, 3, 4);
  const Tokenization t = windows(img, 392, fixation(400, 300));
  check_plan(t, 392, 14, "centre");
  ASSERT_EQ(t.batch.windows.size(), 2u);
  const TokenWindow& w = t.batch.windows[1];
  EXPECT_EQ(w.kind, TokenWindow::Kind::query);
  EXPECT_EQ(w.level, 0);
  EXPECT_EQ(w.box, (std::array<float, 4>{288, 188, 512, 412}));
  // Near a corner the window stays inside the image.
  const Tokenization c = windows(img, 392, fixation(880, 10));
  ASSERT_EQ(c.batch.windows.size(), 2u);
  EXPECT_EQ(c.batch.windows[1].box, (std::array<float, 4>{672, 0, 896, 224}));
  check_plan(c, 392, 14, "corner");
  // A region's window is centred on the region.
  Query r;
  r.regions.push_back({100, 100, 300, 200});
  const Tokenization g = windows(img, 392, r);
  ASSERT_EQ(g.batch.windows.size(), 2u);
  EXPECT_EQ(g.batch.windows[1].box, (std::array<float, 4>{88, 38, 312, 262}));
}

TEST(Windows, HandedOnTokensNeverExceedTheBudget) {
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{448, 448}, {896, 896}, {1000, 460}, {300, 700},
                                                             {200, 150}, {1600, 900}})
    for (int budget : {50, 196, 250, 392, 500, 800, 1500})
      for (int nq = 0; nq < 3; ++nq) {
        const ImageU8 img = test::random_image(w, h, 3, uint32_t(w + budget));
        Query q;
        for (int k = 0; k < nq; ++k) q.fixations.push_back({.x_px = float(w) * (0.2f + 0.5f * k), .y_px = float(h) / 3});
        const std::string what = std::to_string(w) + "x" + std::to_string(h) + " budget " + std::to_string(budget) +
                                 " fixations " + std::to_string(nq);
        check_plan(windows(img, budget, q), budget, 14, what);
        check_plan(windows(img, budget, q, 7, 14), budget, 7, what + " grid 7 patch 14");
      }
}

TEST(Windows, KeepCoveredHandsEveryTokenOn) {
  const ImageU8 img = test::random_image(896, 896, 3, 5);
  const Tokenization t = windows(img, 1000, fixation(300, 300), 14, 16, DType::f32, /*keep_covered=*/true);
  EXPECT_EQ(t.batch.kept(), t.batch.size());
  EXPECT_LE(t.batch.size(), 1000);
  EXPECT_GE(t.batch.windows.size(), 2u);
}

TEST(Windows, WithoutAQueryTheWindowGoesWhereTheDetailIs) {
  // Flat grey but for a noisy 150-px square in the lower right.
  ImageU8 img = test::constant_image(896, 896, 3, 128);
  const ImageU8 noise = test::random_image(150, 150, 3, 6);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 150; ++y)
      for (int x = 0; x < 150; ++x) img.at(c, 650 + y, 620 + x) = noise.at(c, y, x);
  const Tokenization t = windows(img, 392);
  check_plan(t, 392, 14, "noisy square");
  ASSERT_GE(t.batch.windows.size(), 2u);
  EXPECT_EQ(t.batch.windows[0].grid_x, 14);
  // A square of detail, not a line: one native window holds it.
  const TokenWindow& w = t.batch.windows[1];
  EXPECT_EQ(w.kind, TokenWindow::Kind::detail);
  EXPECT_EQ(w.grid_x, 14);
  EXPECT_EQ(w.grid_y, 14);
  EXPECT_TRUE(inside({620, 650, 770, 800}, w.box)) << w.box[0] << "," << w.box[1] << "," << w.box[2] << "," << w.box[3];
  for (size_t i = 1; i < t.batch.windows.size(); ++i) {
    const auto& b = t.batch.windows[i].box;
    EXPECT_TRUE(b[2] > 620 && b[0] < 770 && b[3] > 650 && b[1] < 800) << "window " << i << " is off the detail";
  }
}

// A relevance map with the same detail on every tile at every level: nothing stands out.
RelevanceMap flat_relevance(int w, int h, int P, int levels) {
  RelevanceMap r;
  r.grid = TileGrid::make(w, h, P);
  const size_t n = size_t(r.grid.tiles());
  r.prior.assign(n, 0.5f);
  r.information.assign(n, 0.0f);
  r.saliency.assign(n, 0.0f);
  r.query.assign(n, 0.0f);
  r.detail.assign(size_t(levels), std::vector<float>(n, 1.0f));
  r.score.assign(n, 0.5f + float(levels));
  return r;
}

// The finest scale (original px per sample) the plan sees each tile's centre at.
std::vector<float> finest_scale(const WindowPlan& plan) {
  const TileGrid g = TileGrid::make(plan.image_width, plan.image_height, plan.patch_px);
  std::vector<float> s(size_t(g.tiles()), std::numeric_limits<float>::infinity());
  for (int y = 0; y < g.tiles_y; ++y)
    for (int x = 0; x < g.tiles_x; ++x) {
      const float cx = std::min((x + 0.5f) * plan.patch_px, plan.image_width - 0.5f);
      const float cy = std::min((y + 0.5f) * plan.patch_px, plan.image_height - 0.5f);
      for (const TokenWindow& w : plan.windows) {
        if (cx < w.box[0] || cx >= w.box[2] || cy < w.box[1] || cy >= w.box[3]) continue;
        const float sx = (w.box[2] - w.box[0]) / float(w.grid_x * plan.patch_px);
        const float sy = (w.box[3] - w.box[1]) / float(w.grid_y * plan.patch_px);
        s[size_t(y) * g.tiles_x + x] = std::min(s[size_t(y) * g.tiles_x + x], std::max(sx, sy));
      }
    }
  return s;
}

TEST(Windows, WithoutAQueryAFlatMapIsNeverCoarserThanUniform) {
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{448, 448}, {896, 896}, {1000, 460}, {640, 480},
                                                             {1600, 900}})
    for (int budget : {392, 500, 800}) {
      SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " budget " + std::to_string(budget));
      const RelevanceMap rel = flat_relevance(w, h, 16, 6);
      const WindowPlan plan = plan_windows(rel, {}, {.budget_tokens = budget, .grid = 14});
      EXPECT_LE(plan.kept_tokens(), budget);
      const UniformGrid u = uniform_grid(w, h, 16, budget);
      const float ux = float(w) / float(u.grid_x * 16), uy = float(h) / float(u.grid_y * 16);
      const std::vector<float> s = finest_scale(plan);
      for (size_t t = 0; t < s.size(); ++t)
        ASSERT_LE(s[t], std::max(ux, uy) * 1.001f) << "tile " << t << " of " << s.size();
    }
  // With a query the windows stay: the query decides, not the flatness.
  Query q;
  q.fixations.push_back({.x_px = 300, .y_px = 300});
  const WindowPlan fix = plan_windows(flat_relevance(896, 896, 16, 6), q, {.budget_tokens = 392, .grid = 14});
  ASSERT_GE(fix.windows.size(), 2u);
  EXPECT_EQ(fix.windows[0].grid_x, 14);
  EXPECT_EQ(fix.windows[1].kind, TokenWindow::Kind::query);
}

// Text-like lines: rows of 5 x 7 glyphs of random strokes, `cell` px a stroke, dark on the light
// background, `chars` glyphs long.
void draw_line(ImageU8& img, int x0, int y0, int chars, int cell, uint32_t seed) {
  uint32_t r = seed * 2654435761u + 1;
  for (int c = 0; c < chars; ++c)
    for (int gy = 0; gy < 7; ++gy)
      for (int gx = 0; gx < 5; ++gx) {
        r = r * 1664525u + 1013904223u;
        if ((r >> 16) % 3 != 0) continue;  // a third of the cells inked
        for (int y = 0; y < cell; ++y)
          for (int x = 0; x < cell; ++x)
            for (int ch = 0; ch < 3; ++ch) img.at(ch, y0 + gy * cell + y, x0 + (c * 6 + gx) * cell + x) = 25;
      }
}

// A photo-like background: smooth shading plus mild grain.
ImageU8 shaded(int w, int h, uint32_t seed) {
  ImageU8 img = test::random_image(w, h, 3, seed);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        img.at(c, y, x) = uint8_t(100 + 10 * c + x * 60 / w + y * 40 / h + img.at(c, y, x) % 7);  // <= 226
  return img;
}

TEST(Windows, WithoutAQueryTextLinesGetFullResolution) {
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{448, 448}, {896, 896}, {1024, 640}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    ImageU8 img = shaded(w, h, 21);
    // Three short lines of 14-px glyphs (2-px strokes) in different parts of the image, at odd
    // pixels: 2-px strokes on even ones would be exact in mip 1, and the base view of a 448-px
    // image would already show them whole.
    const std::vector<std::array<int, 2>> at{
        {w / 10 | 1, h / 8 | 1}, {w / 2 | 1, h / 2 | 1}, {w / 5 | 1, 3 * h / 4 | 1}};
    for (size_t i = 0; i < at.size(); ++i) draw_line(img, at[i][0], at[i][1], 10, 2, uint32_t(i + 1));
    const Tokenization t = windows(img, 392);
    check_plan(t, 392, 14, "text lines");
    // The base view stays native (the text stands out: no uniform fallback), and every line is
    // inside a level-0 window.
    EXPECT_EQ(t.batch.windows[0].grid_x, 14);
    for (const auto& a : at) {
      const std::array<float, 4> line{float(a[0]), float(a[1]), float(a[0] + 10 * 12 - 2), float(a[1] + 14)};
      bool seen = false;
      for (const TokenWindow& win : t.batch.windows) seen |= win.level == 0 && inside(line, win.box);
      if (!seen)
        for (const TokenWindow& win : t.batch.windows)
          ADD_FAILURE() << "line at " << a[0] << "," << a[1] << " in no level-0 window; window " << win.grid_x << "x"
                        << win.grid_y << " level " << win.level << " at " << win.box[0] << "," << win.box[1] << ","
                        << win.box[2] << "," << win.box[3];
    }
  }
}

TEST(Windows, WithoutAQueryAPageOfTextIsNeverCoarserThanUniform) {
  // Lines of small glyphs over the whole image, a line and a half apart: the detail is everywhere.
  ImageU8 img = test::constant_image(896, 896, 3, 220);
  for (int y = 8, k = 0; y + 14 < 896; y += 21, ++k) draw_line(img, 9, y, 73, 2, uint32_t(k + 7));
  const Tokenization t = windows(img, 392);
  check_plan(t, 392, 14, "page");
  const UniformGrid u = uniform_grid(896, 896, 16, 392);
  const std::vector<float> s = finest_scale(*t.windows);
  for (float v : s) ASSERT_LE(v, 896.0f / float(u.grid_x * 16) * 1.001f);
}

TEST(Windows, PatchesAreTheMipPixelsAndTheBaseViewAnAreaResize) {
  const ImageU8 img = test::gradient_image(512, 384, 3);  // detail at every scale
  const Tokenization t = windows(img, 2000, fixation(200, 150), 4, 16, DType::u8);
  check_plan(t, 2000, 4, "u8");
  const TokenBatch& b = t.batch;
  Executor exec({.threads = 1});
  const int P = 16;
  int64_t row = 0;
  for (const TokenWindow& w : b.windows) {
    const ImageU8 src = w.level < 0 ? resize_area(t.pyramid.view(0), w.grid_x * P, w.grid_y * P, exec)
                                    : to_image(t.pyramid.view(w.level));
    const int ox = w.level < 0 ? 0 : int(w.box[0]) >> w.level, oy = w.level < 0 ? 0 : int(w.box[1]) >> w.level;
    for (int64_t i = 0; i < w.tokens(); ++i, ++row) {
      const int gx = int(i % w.grid_x), gy = int(i / w.grid_x);
      const uint8_t* p = b.patches.data<uint8_t>() + row * 3 * P * P;
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < P; ++y)
          for (int x = 0; x < P; ++x)
            ASSERT_EQ(p[(c * P + y) * P + x], src.at(c, oy + gy * P + y, ox + gx * P + x)) << "window level " << w.level;
    }
  }
  EXPECT_GE(b.windows.size(), 3u);  // the test reaches a level-1 window too
  EXPECT_TRUE(std::any_of(b.windows.begin(), b.windows.end(), [](const TokenWindow& w) { return w.level == 1; }));
}

TEST(Windows, WhatTheModelSeesIsFullResolutionInsideTheFinestWindow) {
  const ImageU8 img = test::random_image(448, 448, 3, 8);
  const Tokenization t = windows(img, 392, fixation(224, 224), 14, 16, DType::u8);
  ASSERT_EQ(t.batch.windows.size(), 2u);
  Executor exec({.threads = 2});
  const ImageU8 seen = reconstruct(t.batch, 448, 448, exec);
  const auto& box = t.batch.windows[1].box;
  for (int c = 0; c < 3; ++c)
    for (int y = int(box[1]); y < int(box[3]); ++y)
      for (int x = int(box[0]); x < int(box[2]); ++x) ASSERT_EQ(seen.at(c, y, x), img.at(c, y, x));
  // Outside it, the base view's half resolution: not the raw noise.
  int same = 0;
  for (int x = 0; x < 80; ++x) same += seen.at(0, 400, x) == img.at(0, 400, x);
  EXPECT_LT(same, 40);
}

TEST(Windows, RateMapNamesTheFinestWindow) {
  const ImageU8 img = test::random_image(896, 896, 3, 9);
  const Tokenization t = windows(img, 392, fixation(100, 100));
  const RateMap& r = t.allocation.rate_map;
  ASSERT_EQ(r.level.size(), size_t(56 * 56));
  EXPECT_EQ(r.level[size_t(2) * 56 + 2], 0);     // in the fixation's level-0 window
  EXPECT_EQ(r.level[size_t(50) * 56 + 50], 2);   // the base view: 4 px a pixel
}

TEST(Windows, TokenFileHoldsTheWindows) {
  const ImageU8 img = test::random_image(448, 448, 3, 10);
  const Tokenization t = windows(img, 392, fixation(100, 300));
  TokenizeParams p;
  p.foveation = Foveation::windows;
  p.alloc.budget_tokens = 392;
  const std::string path = test::temp_dir("windows_file") + "/t.safetensors";
  save_tokens(path, t, fixation(100, 300), p);
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("mode"), "windows");
  EXPECT_EQ(f.metadata().at("foveation"), "windows");
  EXPECT_EQ(f.metadata().at("windows"), "2");
  EXPECT_EQ(f.metadata().at("tokens"), "392");
  EXPECT_EQ(f.metadata().at("tokens_kept"), std::to_string(t.batch.kept()));
  EXPECT_EQ(f.metadata().at("window_kinds"), "base,query");
  const Tensor window = f.load(*f.find("window"));
  const Tensor covered = f.load(*f.find("covered"));
  const Tensor boxes = f.load(*f.find("window_boxes"));
  const Tensor grids = f.load(*f.find("window_grids"));
  const Tensor levels = f.load(*f.find("window_levels"));
  EXPECT_EQ(window.shape(), (std::vector<int64_t>{392}));
  EXPECT_EQ(covered.shape(), (std::vector<int64_t>{392}));
  EXPECT_EQ(boxes.shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(grids.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_FLOAT_EQ(levels.data<float>()[0], 1.0f);  // 448 px resized to 224: 2 px a pixel
  EXPECT_FLOAT_EQ(levels.data<float>()[1], 0.0f);
  EXPECT_FLOAT_EQ(boxes.data<float>()[4], 0.0f);     // the level-0 window, clamped to x = 0
  EXPECT_FLOAT_EQ(boxes.data<float>()[5], 188.0f);
}

TEST(Windows, BadParametersAreOneClearError) {
  const ImageU8 img = test::random_image(64, 64, 3, 11);
  Executor exec({.threads = 1});
  TokenizeParams p;
  p.foveation = Foveation::windows;
  p.windows.grid = 0;
  EXPECT_THROW(tokenize(img.clone(), {}, p, exec), Error);
  RelevanceMap rel = compute_relevance(build_pyramid(img.clone(), {}, exec), 16, {}, {}, exec);
  EXPECT_THROW(plan_windows(rel, {}, {.budget_tokens = 0}), Error);
  EXPECT_THROW(plan_windows(rel, {}, {.budget_tokens = 10, .grid = 4, .max_windows = 0}), Error);
}

TEST(Windows, CliTokenizeWritesWindowsAndRefusesWhatItWouldIgnore) {
  const std::string dir = test::temp_dir("windows_cli");
  const std::string png = dir + "/in.png";
  save_png(test::random_image(448, 448, 3, 12), png);
  const auto r = test::run_cli({"tokenize", png, "--foveation", "windows", "--fixation", "100,100", "-o",
                                dir + "/t.safetensors", "--overlay", dir + "/o.png", "--seen", dir + "/s.png", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"mode\": \"windows\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"tokens_encoded\": 392"), std::string::npos) << r.out;  // default budget 2·14²
  const SafetensorsFile f = SafetensorsFile::open(dir + "/t.safetensors");
  EXPECT_EQ(f.metadata().at("budget"), "392");
  const ImageU8 overlay = load_image(dir + "/o.png");
  EXPECT_EQ(overlay.width(), 448);
  // The query window's outline, three pixels wide in level 0's red, at its left edge (x = 0..2).
  EXPECT_EQ(overlay.at(0, 150, 1), 230);
  EXPECT_EQ(overlay.at(1, 150, 1), 25);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--foveation", "windows", "--uniform"}, {"--window-grid", "7"}, {"--keep-covered"},
        {"--foveation", "windows", "--max-level", "3"}, {"--foveation", "tiles"}}) {
    std::vector<std::string> args{"tokenize", png, "-o", dir + "/bad.safetensors"};
    args.insert(args.end(), bad.begin(), bad.end());
    const auto b = test::run_cli(args);
    EXPECT_NE(b.exit_code, 0) << bad[0];
    EXPECT_EQ(b.err.rfind("fovea: error:", 0), 0u) << b.err;
    EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << b.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad.safetensors"));
}

}  // namespace
}  // namespace fovea
