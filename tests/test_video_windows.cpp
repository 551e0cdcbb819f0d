// Video in the windows foveation: every window and the base view is a sequence of its own,
// reused bit for bit while its pixels stay, encoded again (as a standalone image) when they
// change; the plan keeps its windows while the fixation stays inside them and moves one that
// the fixation leaves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/video.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

// A 256×192 frame, 64-px windows of 4×4 tokens, 32 tokens: a base view and one query window.
VideoParams windows_params(Reuse reuse = Reuse::exact) {
  VideoParams vp;
  vp.tokenize.foveation = Foveation::windows;
  vp.tokenize.windows.grid = 4;
  vp.tokenize.alloc.budget_tokens = 32;
  vp.reuse = reuse;
  return vp;
}

Query at(float x, float y) {
  Query q;
  q.fixations.push_back({x, y});
  return q;
}

void invert_tile(ImageU8& img, int x0, int y0, int side = 16) {
  for (int c = 0; c < img.channels(); ++c)
    for (int y = y0; y < y0 + side; ++y)
      for (int x = x0; x < x0 + side; ++x) img.at(c, y, x) = uint8_t(255 - img.at(c, y, x));
}

int query_window(const FrameResult& r) {
  for (size_t w = 0; w < r.batch.windows.size(); ++w)
    if (r.batch.windows[w].kind == TokenWindow::Kind::query) return int(w);
  return -1;
}

// The embeddings rows (FrameResult::rows) of window w.
std::vector<int64_t> rows_of_window(const FrameResult& r, int w) {
  std::vector<int64_t> out;
  for (size_t k = 0; k < r.rows.size(); ++k)
    if (r.batch.window.data<int32_t>()[r.rows[k]] == w) out.push_back(int64_t(k));
  return out;
}

bool same_rows(const Tensor& a, const std::vector<int64_t>& ra, const Tensor& b, const std::vector<int64_t>& rb) {
  if (ra.size() != rb.size()) return false;
  const int64_t d = a.dim(1);
  for (size_t i = 0; i < ra.size(); ++i)
    if (std::memcmp(a.data<float>() + ra[i] * d, b.data<float>() + rb[i] * d, size_t(d) * 4) != 0) return false;
  return true;
}

TEST(VideoWindows, StillClipReusesEveryWindowBitForBit) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  VideoSession session(windows_params(), &model, exec);
  const ImageU8 img = test::gradient_image(256, 192, 3);
  FrameResult first = session.process(img.clone(), at(64, 64), 0, 0);
  ASSERT_GE(first.batch.windows.size(), 2u);
  ASSERT_GE(query_window(first), 1);
  EXPECT_TRUE(first.refresh);
  EXPECT_EQ(first.recomputed_tokens, first.batch.size());
  EXPECT_EQ(int64_t(first.rows.size()), first.embeddings.dim(0));
  EXPECT_LE(first.embeddings.dim(0), 32);
  ASSERT_EQ(first.window_class_tokens.dim(0), int64_t(first.batch.windows.size()));
  for (int f = 1; f < 4; ++f) {
    FrameResult r = session.process(img.clone(), at(64, 64), f, f / 25.0);
    EXPECT_FALSE(r.refresh);
    EXPECT_FALSE(r.layout_changed);
    EXPECT_EQ(r.dirty_tiles, 0);
    EXPECT_EQ(r.recomputed_tokens, 0);
    EXPECT_EQ(r.encoder_work, 0);
    for (uint8_t v : r.window_reused) EXPECT_EQ(v, 1);
    ASSERT_EQ(r.embeddings.size_bytes(), first.embeddings.size_bytes());
    EXPECT_EQ(0, std::memcmp(r.embeddings.bytes(), first.embeddings.bytes(), first.embeddings.size_bytes()));
    EXPECT_EQ(0, std::memcmp(r.window_class_tokens.bytes(), first.window_class_tokens.bytes(),
                             first.window_class_tokens.size_bytes()));
    EXPECT_EQ(r.rows, first.rows);
  }
}

TEST(VideoWindows, ChangedWindowIsEncodedAgainAsItsCropAlone) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  const VideoParams vp = windows_params();
  VideoSession session(vp, &model, exec);
  ImageU8 img = test::gradient_image(256, 192, 3);
  const FrameResult r0 = session.process(img.clone(), at(64, 64), 0, 0);
  const int qw = query_window(r0);
  ASSERT_GE(qw, 1);
  const TokenWindow win = r0.batch.windows[size_t(qw)];
  ASSERT_EQ(win.level, 0);

  // A tile inside the query window changes: the window (and the base view, which sees every
  // tile) is encoded again, and its tokens are what the tower computes for the crop alone.
  invert_tile(img, int(win.box[0]) + 16, int(win.box[1]) + 16);
  const FrameResult r1 = session.process(img.clone(), at(64, 64), 1, 0.04);
  EXPECT_FALSE(r1.refresh);
  ASSERT_EQ(r1.batch.windows.size(), r0.batch.windows.size());
  EXPECT_EQ(r1.window_reused[size_t(qw)], 0);
  EXPECT_EQ(r1.window_reused[0], 0);
  const int x0 = int(win.box[0]), y0 = int(win.box[1]), side = int(win.box[2] - win.box[0]);
  ImageU8 crop(side, side, 3);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < side; ++y)
      for (int x = 0; x < side; ++x) crop.at(c, y, x) = img.at(c, y0 + y, x0 + x);
  const TokenBatch alone = extract_uniform(ImageViewU8(crop), uniform_grid(side, side, 16, win.grid_x * win.grid_y), 16,
                                           vp.tokenize.extract, exec);
  ASSERT_EQ(alone.size(), win.tokens());
  const Encoding e = encode(model, alone.patches, alone.positions, {.image_width = side, .image_height = side}, exec);
  const std::vector<int64_t> rows = rows_of_window(r1, qw);
  ASSERT_EQ(int64_t(rows.size()), win.tokens());  // the finest window: nothing covers it
  const int64_t d = e.embeddings.dim(1);
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* a = r1.embeddings.data<float>() + rows[i] * d;
    const float* b = e.embeddings.data<float>() + int64_t(i) * d;
    double ab = 0, aa = 0, bb = 0;
    for (int64_t j = 0; j < d; ++j) ab += double(a[j]) * b[j], aa += double(a[j]) * a[j], bb += double(b[j]) * b[j];
    EXPECT_GT(ab / std::sqrt(aa * bb), 0.99999) << "token " << i;
  }

  // A tile outside it changes: the query window hands on its outputs of the frame before, bit for bit.
  invert_tile(img, 224, 160);
  const FrameResult r2 = session.process(img.clone(), at(64, 64), 2, 0.08);
  EXPECT_EQ(r2.window_reused[size_t(qw)], 1);
  EXPECT_EQ(r2.window_reused[0], 0);
  EXPECT_TRUE(same_rows(r2.embeddings, rows_of_window(r2, qw), r1.embeddings, rows));
  EXPECT_FALSE(same_rows(r2.embeddings, rows_of_window(r2, 0), r1.embeddings, rows_of_window(r1, 0)));
}

TEST(VideoWindows, AFixationThatLeavesItsWindowMovesIt) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  VideoSession session(windows_params(), &model, exec);
  const ImageU8 img = test::gradient_image(256, 192, 3);
  const FrameResult r0 = session.process(img.clone(), at(64, 64), 0, 0);
  const TokenWindow w0 = r0.batch.windows[size_t(query_window(r0))];
  // A small move, well inside the window: the plan stays and so does every output.
  const FrameResult r1 = session.process(img.clone(), at(70, 68), 1, 0.04);
  EXPECT_FALSE(r1.layout_changed);
  EXPECT_EQ(r1.recomputed_tokens, 0);
  EXPECT_EQ(r1.batch.windows[size_t(query_window(r1))].box, w0.box);
  // The fixation leaves it: the window follows, centred on the fixation, and is encoded again.
  const FrameResult r2 = session.process(img.clone(), at(180, 120), 2, 0.08);
  EXPECT_TRUE(r2.layout_changed);
  const int qw = query_window(r2);
  ASSERT_GE(qw, 1);
  const TokenWindow& w2 = r2.batch.windows[size_t(qw)];
  EXPECT_NE(w2.box, w0.box);
  EXPECT_NEAR(0.5f * (w2.box[0] + w2.box[2]), 180, 1.0f);
  EXPECT_NEAR(0.5f * (w2.box[1] + w2.box[3]), 120, 1.0f);
  EXPECT_EQ(r2.window_reused[size_t(qw)], 0);
  for (int64_t i = 0; i < r2.batch.size(); ++i) {
    if (r2.batch.window.data<int32_t>()[i] == qw) {
      EXPECT_EQ(r2.recomputed[size_t(i)], 1);
    }
  }
  // The base view's pixels did not change: it is reused.
  EXPECT_EQ(r2.window_reused[0], 1);
}

TEST(VideoWindows, ExactReuseGivesReuseOffsEmbeddings) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  VideoSession exact(windows_params(Reuse::exact), &model, exec);
  VideoSession off(windows_params(Reuse::off), &model, exec);
  ImageU8 img = test::gradient_image(256, 192, 3);
  int reused = 0;
  for (int f = 0; f < 6; ++f) {
    if (f > 0) invert_tile(img, 160 + 16 * f, 144);  // motion away from the fixation
    const FrameResult a = exact.process(img.clone(), at(64, 64), f, f / 25.0);
    const FrameResult b = off.process(img.clone(), at(64, 64), f, f / 25.0);
    ASSERT_EQ(a.rows, b.rows);
    ASSERT_EQ(a.embeddings.numel(), b.embeddings.numel());
    double worst = 0;
    for (int64_t i = 0; i < a.embeddings.numel(); ++i)
      worst = std::max(worst, double(std::fabs(a.embeddings.data<float>()[i] - b.embeddings.data<float>()[i])));
    EXPECT_LT(worst, 1e-3) << "frame " << f;
    if (f > 0) reused += std::count(a.window_reused.begin(), a.window_reused.end(), uint8_t(1));
    EXPECT_EQ(std::count(b.window_reused.begin(), b.window_reused.end(), uint8_t(1)), 0);
  }
  EXPECT_EQ(reused, 5);  // the query window, on every frame after the first
}

TEST(VideoWindows, BadWindowParametersThrow) {
  Executor exec({.threads = 1});
  VideoParams vp = windows_params();
  vp.tokenize.windows.grid = 0;
  EXPECT_THROW(VideoSession(vp, nullptr, exec), Error);
  vp = windows_params();
  vp.tokenize.windows.max_windows = 0;
  EXPECT_THROW(VideoSession(vp, nullptr, exec), Error);
}

}  // namespace
}  // namespace fovea
