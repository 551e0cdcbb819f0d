// Video: the reader (order, pts, bounded memory, bad and corrupt input), the incremental
// pyramid, the change test, the session's reuse and the incremental encoder, and the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "fovea/embeddings.hpp"
#include "fovea/encoder.hpp"
#include "fovea/image.hpp"
#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/incremental_encoder.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/relevance.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/video.hpp"
#include "encoder/encoder_internal.hpp"
#include "test_util.hpp"
#include "video/change.hpp"

namespace fovea {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return test::source_dir() + "/tests/data/video/" + name; }


int64_t rss_kib() {
  std::ifstream s("/proc/self/status");
  std::string line;
  while (std::getline(s, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

class VideoTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { quiet_ffmpeg_log(); }
};

// ---- incremental pyramid --------------------------------------------------------------------

// Copies the P×P tiles marked in `dirty` (tx tiles per row) from `next` into `l0`: a frame
// where exactly those tiles changed.
void paste_dirty_tiles(ImageU8& l0, const ImageU8& next, const std::vector<uint8_t>& dirty, int tx, int P) {
  const int w = l0.width(), h = l0.height();
  for (int t = 0; t < int(dirty.size()); ++t) {
    if (!dirty[size_t(t)]) continue;
    const int x0 = (t % tx) * P, y0 = (t / tx) * P;
    for (int c = 0; c < 3; ++c)
      for (int y = y0; y < std::min(h, y0 + P); ++y)
        for (int x = x0; x < std::min(w, x0 + P); ++x) l0.at(c, y, x) = next.at(c, y, x);
  }
}

template <typename T>
void expect_same_pyramid(const Pyramid<T>& a, const Pyramid<T>& b) {
  ASSERT_EQ(a.num_levels(), b.num_levels());
  for (int l = 0; l < a.num_levels(); ++l)
    for (int c = 0; c < a.channels(); ++c)
      for (int y = 0; y < a.level(l).height(); ++y)
        ASSERT_EQ(0, std::memcmp(a.level(l).row(c, y), b.level(l).row(c, y), sizeof(T) * a.level(l).width()))
            << "level " << l << " channel " << c << " row " << y;
}

TEST_F(VideoTest, IncrementalPyramidEqualsFullRebuild) {
  for (bool reference : {false, true}) {
    Executor exec({.threads = 2, .kernels = reference ? Kernels::reference : Kernels::best});
    for (auto [w, h, P] : {std::tuple{203, 117, 16}, {640, 360, 16}, {97, 300, 14}, {1, 40, 4}, {333, 2, 8}}) {
      SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " P=" + std::to_string(P));
      PyramidU8 pyr = build_pyramid(test::random_image(w, h, 3, 7), {}, exec);
      const int tx = (w + P - 1) / P, ty = (h + P - 1) / P;
      for (int round = 0; round < 3; ++round) {
        std::vector<uint8_t> dirty(size_t(tx) * ty, 0);
        uint32_t s = 12345u + round;
        ImageU8 next = test::random_image(w, h, 3, 100 + round);
        for (size_t i = 0; i < dirty.size(); ++i) {
          s ^= s << 13, s ^= s >> 17, s ^= s << 5;
          dirty[i] = (s % 5) == 0;
        }
        paste_dirty_tiles(pyr.level(0), next, dirty, tx, P);
        const PyramidDirty pd = update_pyramid(pyr, P, dirty, exec);
        const PyramidU8 full = build_pyramid(pyr.level(0).clone(), {}, exec);
        expect_same_pyramid(pyr, full);
        EXPECT_EQ(int(pd.nodes.size()), pyr.num_levels());
      }
    }
  }
  // Float pyramids too.
  Executor exec({.threads = 2});
  PyramidF32 pf = build_pyramid(test::random_image_f32(150, 90, 3, 3), {}, exec);
  std::vector<uint8_t> dirty(size_t(10) * 6, 0);
  dirty[13] = dirty[40] = 1;
  for (int c = 0; c < 3; ++c)
    for (int y = 16; y < 32; ++y) pf.level(0).at(c, y, 50) = 0.25f, pf.level(0).at(c, y + 48, 0) = 0.75f;
  update_pyramid(pf, 16, dirty, exec);
  expect_same_pyramid(pf, build_pyramid(pf.level(0).clone(), {}, exec));
}

// The session's relevance re-measures only the changed tiles' detail energies: every field of
// the map equals a full compute_relevance bit for bit, for patch sizes that do and do not divide
// into the mips' samples (their samples reach into the next tile), odd sizes, with and without
// a query (a query changes the normalisation, the cap and the fixation's shape), both kernels.
TEST_F(VideoTest, IncrementalRelevanceEqualsFullRecomputation) {
  auto same = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
  };
  for (bool reference : {false, true}) {
    Executor exec({.threads = 2, .kernels = reference ? Kernels::reference : Kernels::best});
    for (auto [w, h, P] : {std::tuple{203, 117, 16}, {320, 180, 16}, {97, 300, 14}, {130, 77, 12}, {64, 40, 8}}) {
      SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " P=" + std::to_string(P) +
                   (reference ? " reference" : ""));
      // Smooth content with a few detailed patches (so a fixation on one takes its shape).
      ImageU8 img = test::gradient_image(w, h, 3);
      const ImageU8 noise = test::random_image(w, h, 3, 5);
      for (int c = 0; c < 3; ++c)
        for (int y = h / 4; y < h / 2; ++y)
          for (int x = w / 3; x < w / 2; ++x) img.at(c, y, x) = noise.at(c, y, x);
      PyramidU8 pyr = build_pyramid(std::move(img), {}, exec);
      const int tx = (w + P - 1) / P, ty = (h + P - 1) / P;
      RelevanceCache cache;
      RelevanceParams rp;
      uint32_t s = 777u + uint32_t(P);
      for (int round = 0; round < 6; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        Query q;
        if (round % 3 != 2) q.fixations.push_back({float(w) * (round < 3 ? 0.4f : 0.8f), float(h) * 0.35f});
        std::vector<uint8_t> dirty;
        if (round > 0) {
          dirty.assign(size_t(tx) * ty, 0);
          const ImageU8 next = test::random_image(w, h, 3, 200 + uint32_t(round));
          for (size_t i = 0; i < dirty.size(); ++i) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            dirty[i] = (s % 7) == 0;
          }
          dirty.back() = 1;  // the bottom-right (partial) tile
          paste_dirty_tiles(pyr.level(0), next, dirty, tx, P);
          update_pyramid(pyr, P, dirty, exec);
        }
        const RelevanceMap inc = compute_relevance(pyr, P, q, rp, exec, cache, dirty);
        const RelevanceMap full = compute_relevance(pyr, P, q, rp, exec);
        EXPECT_EQ(cache.levels, pyr.num_levels());
        same(inc.score, full.score, "score");
        same(inc.prior, full.prior, "prior");
        same(inc.query, full.query, "query");
        same(inc.detail_total, full.detail_total, "detail_total");
        ASSERT_EQ(inc.detail.size(), full.detail.size());
        for (size_t j = 0; j < inc.detail.size(); ++j) same(inc.detail[j], full.detail[j], "detail");
        EXPECT_EQ(inc.detail_scale, full.detail_scale);
      }
      // A mask of the wrong length is refused.
      EXPECT_THROW(compute_relevance(pyr, P, Query{}, rp, exec, cache, std::vector<uint8_t>(3, 0)), Error);
    }
  }
  // Without the detail term (and no query) nothing is measured, and nothing is kept.
  Executor exec({.threads = 2});
  const PyramidU8 pyr = build_pyramid(test::random_image(100, 60, 3, 9), {}, exec);
  RelevanceCache cache;
  RelevanceParams rp;
  rp.weights.detail = 0;
  const RelevanceMap m = compute_relevance(pyr, 16, Query{}, rp, exec, cache, {});
  EXPECT_EQ(cache.levels, 0);
  EXPECT_TRUE(m.detail.empty());
}

TEST_F(VideoTest, DirtyNodesAreTheFootprintsOfTheChangedTile) {
  Executor exec({.threads = 1});
  PyramidU8 pyr = build_pyramid(test::random_image(256, 160, 3, 1), {}, exec);
  std::vector<uint8_t> dirty(size_t(16) * 10, 0);
  const int tx = 11, ty = 6;
  dirty[size_t(ty) * 16 + tx] = 1;
  const PyramidDirty pd = update_pyramid(pyr, 16, dirty, exec);
  for (int l = 0; l < pyr.num_levels(); ++l)
    for (int y = 0; y < pd.nodes_y[size_t(l)]; ++y)
      for (int x = 0; x < pd.nodes_x[size_t(l)]; ++x)
        EXPECT_EQ(pd.dirty(l, x, y), x == (tx >> l) && y == (ty >> l)) << "level " << l << " node " << x << "," << y;
  EXPECT_THROW(update_pyramid(pyr, 16, std::vector<uint8_t>(3), exec), Error);
}

TEST_F(VideoTest, ChangeTestToleratesNoiseAndSeesSmallObjects) {
  Executor exec({.threads = 2});
  ImageU8 a = test::random_image(64, 32, 3, 5);
  ImageU8 b = a.clone();
  const TileGrid g = TileGrid::make(64, 32, 16);
  // ±2 levels of noise everywhere: below a threshold of 4.
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 64; ++x) b.at(c, y, x) = uint8_t(std::clamp(int(a.at(c, y, x)) + ((x + y + c) % 2 ? 2 : -2), 0, 255));
  std::vector<uint8_t> d = changed_tiles(a, b, g, 4.0f, exec);
  EXPECT_EQ(std::count(d.begin(), d.end(), 1), 0);
  // A 3×3 object in tile (2, 1): that tile only.
  for (int c = 0; c < 3; ++c)
    for (int y = 20; y < 23; ++y)
      for (int x = 37; x < 40; ++x) b.at(c, y, x) = uint8_t(a.at(c, y, x) ^ 0x80);
  d = changed_tiles(a, b, g, 4.0f, exec);
  EXPECT_EQ(std::count(d.begin(), d.end(), 1), 1);
  EXPECT_EQ(d[1 * 4 + 2], 1);
  // Threshold 0: any difference.
  d = changed_tiles(a, b, g, 0.0f, exec);
  EXPECT_EQ(std::count(d.begin(), d.end(), 1), 8);
}

TEST_F(VideoTest, ChangeRowKernelMatchesReference) {
  std::vector<uint8_t> a(301), b(301);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i * 37 + 11), b[i] = uint8_t(i * 91 + (i % 7) * 40);
  a[5] = 0, b[5] = 255, a[6] = 255, b[6] = 0;  // the extremes both ways
  for (const int n : {0, 1, 15, 16, 17, 63, 64, 65, 301}) {
    std::vector<uint16_t> fast(size_t(n) + 1, 7), ref(size_t(n) + 1, 7);
    for (int rep = 0; rep < 12; ++rep) {  // 12 rows: a band of 4 rows × 3 channels
      video_detail::absdiff_accumulate_row(a.data(), b.data(), fast.data(), n);
      video_detail::absdiff_accumulate_row_ref(a.data(), b.data(), ref.data(), n);
    }
    EXPECT_EQ(fast, ref) << "n " << n;
    if (n > 6) {
      EXPECT_EQ(ref[5], 7 + 12 * 255);
    }
    EXPECT_EQ(fast[size_t(n)], 7);  // nothing past n
  }
}

// ---- session --------------------------------------------------------------------------------

VideoParams small_params(int budget) {
  VideoParams vp;
  vp.tokenize.alloc.budget_tokens = budget;
  return vp;
}

TEST_F(VideoTest, StaticClipRecomputesNothingAfterTheFirstFrame) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-s16");
  VideoParams vp = small_params(40);
  VideoSession session(vp, &model, exec);
  Query q;
  q.fixations.push_back({100, 60});
  const ImageU8 img = test::gradient_image(224, 160, 3);
  Tensor first;
  for (int f = 0; f < 4; ++f) {
    FrameResult r = session.process(img.clone(), q, f, f / 25.0);
    ASSERT_GT(r.batch.size(), 0);
    if (f == 0) {
      EXPECT_TRUE(r.refresh);
      EXPECT_EQ(r.recomputed_tokens, r.batch.size());
      first = r.embeddings.clone();
    } else {
      EXPECT_FALSE(r.refresh);
      EXPECT_EQ(r.dirty_tiles, 0);
      EXPECT_EQ(r.resampled_tokens, 0);
      EXPECT_EQ(r.recomputed_tokens, 0);
      EXPECT_FALSE(r.layout_changed);
      ASSERT_EQ(r.embeddings.size_bytes(), first.size_bytes());
      EXPECT_EQ(0, std::memcmp(r.embeddings.bytes(), first.bytes(), first.size_bytes()));
    }
  }
}

TEST_F(VideoTest, OneChangedTileDirtiesExactlyTheTokenOverIt) {
  Executor exec({.threads = 2});
  VideoParams vp = small_params(60);
  vp.reuse = Reuse::exact;
  VideoSession session(vp, nullptr, exec);
  Query q;
  q.fixations.push_back({40, 40});
  ImageU8 img = test::gradient_image(320, 192, 3);
  session.process(img.clone(), q, 0, 0);
  const int tx = 15, ty = 9;  // a peripheral tile
  for (int c = 0; c < 3; ++c)
    for (int y = ty * 16; y < ty * 16 + 16; ++y)
      for (int x = tx * 16; x < tx * 16 + 16; ++x) img.at(c, y, x) = uint8_t(255 - img.at(c, y, x));
  FrameResult r = session.process(img.clone(), q, 1, 0.04);
  EXPECT_EQ(r.dirty_tiles, 1);
  EXPECT_FALSE(r.layout_changed);
  ASSERT_EQ(r.resampled_tokens, 1);
  // The resampled token is the one whose footprint holds the tile, and its patch is what a
  // fresh tokenization of the new frame samples.
  const std::vector<Token>& tokens = session.allocation().layout.tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    const bool holds = (tx >> t.level) == t.x && (ty >> t.level) == t.y;
    EXPECT_EQ(r.recomputed[i] != 0, holds) << "token " << i;
  }
  PyramidU8 full = build_pyramid(img.clone(), {}, exec);
  const TokenBatch fresh = extract(full, session.allocation(), vp.tokenize.extract, exec);
  ASSERT_EQ(fresh.patches.size_bytes(), r.batch.patches.size_bytes());
  EXPECT_EQ(0, std::memcmp(fresh.patches.bytes(), r.batch.patches.bytes(), fresh.patches.size_bytes()));
}

TEST_F(VideoTest, SceneCutAndKeyframesRefresh) {
  Executor exec({.threads = 2});
  VideoParams vp = small_params(40);
  vp.keyframe_interval = 3;
  VideoSession session(vp, nullptr, exec);
  const Query q;
  const ImageU8 a = test::gradient_image(160, 96, 3), b = test::random_image(160, 96, 3, 9);
  std::vector<std::string> reasons;
  for (int f = 0; f < 7; ++f) {
    FrameResult r = session.process((f == 4 ? b : (f > 4 ? b : a)).clone(), q, f, 0);
    reasons.push_back(r.refresh ? r.refresh_reason : "-");
  }
  EXPECT_EQ(reasons, (std::vector<std::string>{"first", "-", "-", "keyframe", "scene-cut", "-", "keyframe"}));
}

// ---- incremental encoder ---------------------------------------------------------------------

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return m;
}

TEST_F(VideoTest, IncrementalEncoderFullAndExactModesMatchEncode) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-s16");
  PyramidU8 pyr = build_pyramid(test::gradient_image(192, 128, 3), {}, exec);
  Query q;
  q.fixations.push_back({50, 50});
  const RelevanceMap rel = compute_relevance(pyr, 16, q, {}, exec);
  const Allocation alloc = allocate(rel, {.budget_tokens = 40});
  const TokenBatch b = extract(pyr, alloc, {}, exec);
  const EncodeParams ep{.image_width = 192, .image_height = 128};
  const Encoding ref = encode(model, b.patches, b.positions, ep, exec);
  IncrementalEncoder enc(model);
  IncrementalParams ip{.image_width = 192, .image_height = 128, .reuse_layers = false};
  IncrementalResult r0 = enc.encode(b.patches, b.positions, {}, {}, ip, exec);
  EXPECT_LT(max_abs_diff(r0.embeddings, ref.embeddings), 1e-4);
  EXPECT_FALSE(r0.approximate);
  // Exact mode, every patch embedding reused: the same result.
  const int64_t N = b.size();
  std::vector<int64_t> prev(static_cast<size_t>(N), 0);
  for (int64_t i = 0; i < N; ++i) prev[size_t(i)] = i;
  std::vector<uint8_t> clean(static_cast<size_t>(N), 0);
  IncrementalResult r1 = enc.encode(b.patches, b.positions, prev, clean, ip, exec);
  EXPECT_EQ(r1.patch_embeddings_computed, 0);
  EXPECT_LT(max_abs_diff(r1.embeddings, ref.embeddings), 1e-4);
  // Incremental with nothing changed: nothing recomputed, identical output.
  ip.reuse_layers = true;
  IncrementalResult r2 = enc.encode(b.patches, b.positions, prev, clean, ip, exec);
  IncrementalResult r3 = enc.encode(b.patches, b.positions, prev, clean, ip, exec);
  EXPECT_EQ(std::count(r3.recomputed.begin(), r3.recomputed.end(), 1), 0);
  for (int64_t n : r3.layer_tokens) EXPECT_EQ(n, 0);
  EXPECT_EQ(0, std::memcmp(r2.embeddings.bytes(), r3.embeddings.bytes(), r2.embeddings.size_bytes()));
  // Bad prev_row.
  prev[1] = prev[0];
  EXPECT_THROW(enc.encode(b.patches, b.positions, prev, clean, ip, exec), Error);
}

// Ten frames of a small clip through a model-less session (the encoder's inputs, as the video
// path makes them): a square moves every frame, and the fixation jumps at frame 5, so frame 5
// changes the layout (its previous rows are not the identity).
struct EncoderInputs {
  std::vector<Tensor> patches, positions;
  std::vector<std::vector<int64_t>> prev_row;
  std::vector<std::vector<uint8_t>> dirty;
};
EncoderInputs moving_square_inputs(Executor& exec, int patch_px = 16) {
  VideoParams vp = small_params(30);
  vp.tokenize.patch_px = patch_px;
  vp.reuse = Reuse::exact;
  vp.layout_hysteresis = 0.5f;
  VideoSession session(vp, nullptr, exec);
  EncoderInputs in;
  bool layout_changed_at_5 = false;
  for (int f = 0; f < 10; ++f) {
    ImageU8 img = test::gradient_image(192, 128, 3);
    for (int c = 0; c < 3; ++c)
      for (int y = 70; y < 90; ++y)
        for (int x = 10 + 6 * f; x < 30 + 6 * f; ++x) img.at(c, y, x) = uint8_t(c == 0 ? 250 : 20);
    Query q;
    q.fixations.push_back(f < 5 ? Fixation{40, 40, 1} : Fixation{150, 30, 1});
    FrameResult r = session.process(std::move(img), q, f, f / 25.0);
    if (f == 5) layout_changed_at_5 = r.layout_changed;
    in.patches.push_back(std::move(r.batch.patches));
    in.positions.push_back(std::move(r.batch.positions));
    in.prev_row.push_back(f == 0 ? std::vector<int64_t>{} : r.previous_row);
    in.dirty.push_back(r.recomputed);  // without a model: the resampled tokens
  }
  EXPECT_TRUE(layout_changed_at_5);
  return in;
}

// Frame groups are exact: G frames in one encode_group call give what G encode() calls give.
// Also with a projector (the LLaVA fixture, 8-px patches): `projected` the same way.
TEST_F(VideoTest, EncodeGroupEqualsFrameByFrameBitForBit) {
  VitConfig c;
  c.hidden = 64, c.heads = 4, c.mlp = 128, c.layers = 4, c.grid = 8;
  c.pre_norm = true;
  const VitModel random_model = VitModel::random(c, 3, "test");
  const VitModel llava = VitModel::load(test::source_dir() + "/tests/data/encoder/hf_llava");
  for (const bool reference : {true, false})
  for (const VitModel* mp : {&random_model, &llava}) {
    const VitModel& model = *mp;
    Executor exec({.threads = 2, .kernels = reference ? Kernels::reference : Kernels::best});
    const EncoderInputs in = moving_square_inputs(exec, model.config().patch_px);
    const size_t F = in.patches.size();
    IncrementalParams ip{.image_width = 192, .image_height = 128, .token_threshold = 0.02f};
    auto frame = [&](size_t f) {
      return IncrementalFrame{.patches = &in.patches[f], .positions = &in.positions[f], .prev_row = in.prev_row[f],
                              .patch_dirty = in.dirty[f]};
    };
    IncrementalEncoder one(model);
    std::vector<IncrementalResult> base;
    for (size_t f = 0; f < F; ++f)
      base.push_back(one.encode(in.patches[f], in.positions[f], in.prev_row[f], in.dirty[f], ip, exec));
    // Something was reused and something recomputed, or the comparison proves little.
    int64_t reused = 0, recomputed = 0;
    for (size_t f = 1; f < F; ++f)
      for (int64_t n : base[f].layer_tokens) reused += in.patches[f].dim(0) - n, recomputed += n;
    EXPECT_GT(reused, 0);
    EXPECT_GT(recomputed, 0);
    for (const size_t G : {size_t(3), size_t(4), F}) {
      IncrementalEncoder grouped(model);
      std::vector<IncrementalResult> got;
      for (size_t a = 0; a < F; a += G) {
        std::vector<IncrementalFrame> group;
        for (size_t f = a; f < std::min(F, a + G); ++f) group.push_back(frame(f));
        for (IncrementalResult& r : grouped.encode_group(group, ip, exec)) got.push_back(std::move(r));
      }
      ASSERT_EQ(got.size(), F);
      for (size_t f = 0; f < F; ++f) {
        SCOPED_TRACE(model.describe() + ", reference " + std::to_string(reference) + ", G " + std::to_string(G) +
                     ", frame " + std::to_string(f));
        ASSERT_EQ(got[f].projected.size_bytes(), base[f].projected.size_bytes());
        EXPECT_EQ(got[f].projected.rank() == 2, mp == &llava);
        EXPECT_EQ(got[f].layer_tokens, base[f].layer_tokens);
        EXPECT_EQ(got[f].recomputed, base[f].recomputed);
        EXPECT_EQ(got[f].approximate, base[f].approximate);
        ASSERT_EQ(got[f].embeddings.size_bytes(), base[f].embeddings.size_bytes());
        // The reference kernels are row-independent: bit for bit. oneDNN may pick another GEMM
        // kernel for another row count (it does not on AVX-512, where this is bit for bit too).
        if (reference) {
          EXPECT_EQ(0, std::memcmp(got[f].embeddings.bytes(), base[f].embeddings.bytes(), base[f].embeddings.size_bytes()));
          ASSERT_EQ(got[f].projected.size_bytes(), base[f].projected.size_bytes());
          if (base[f].projected.size_bytes() > 0) {  // no projector: both empty (null data, memcmp must not see it)
            EXPECT_EQ(0, std::memcmp(got[f].projected.bytes(), base[f].projected.bytes(), base[f].projected.size_bytes()));
          }
        } else {
          EXPECT_LT(max_abs_diff(got[f].embeddings, base[f].embeddings), 1e-5);
          EXPECT_LT(max_abs_diff(got[f].projected, base[f].projected), 1e-5);
        }
      }
    }
  }
}

// The projector per frame: a full pass gives fovea::encode's `projected`; later frames project
// exactly the tokens whose last hidden state changed, and keep the others' rows bit for bit.
TEST_F(VideoTest, IncrementalEncoderProjectsOnlyChangedTokens) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load(test::source_dir() + "/tests/data/encoder/hf_llava");
  const EncoderInputs in = moving_square_inputs(exec, model.config().patch_px);
  IncrementalEncoder enc(model);
  IncrementalParams ip{.image_width = 192, .image_height = 128};
  IncrementalResult prev = enc.encode(in.patches[0], in.positions[0], {}, {}, ip, exec);
  const EncodeParams ep{.image_width = 192, .image_height = 128};
  const Encoding full = encode(model, in.patches[0], in.positions[0], ep, exec);
  ASSERT_EQ(prev.projected.rank(), 2);
  EXPECT_EQ(prev.projected.dim(1), model.config().projector_dim);
  EXPECT_LT(max_abs_diff(prev.projected, full.projected), 1e-4);
  int64_t kept = 0, changed = 0;
  for (size_t f = 1; f < 5; ++f) {  // frames 1-4 keep the layout
    IncrementalResult r = enc.encode(in.patches[f], in.positions[f], in.prev_row[f], in.dirty[f], ip, exec);
    const int64_t D = r.embeddings.dim(1), E = r.projected.dim(1);
    for (int64_t i = 0; i < r.embeddings.dim(0); ++i) {
      const int64_t p = in.prev_row[f][size_t(i)];
      ASSERT_GE(p, 0);
      const bool same = !std::memcmp(r.embeddings.data<float>() + i * D, prev.embeddings.data<float>() + p * D, size_t(D) * 4);
      const bool same_proj =
          !std::memcmp(r.projected.data<float>() + i * E, prev.projected.data<float>() + p * E, size_t(E) * 4);
      if (same) EXPECT_TRUE(same_proj) << "frame " << f << " token " << i;
      else EXPECT_FALSE(same_proj) << "frame " << f << " token " << i;
      (same ? kept : changed) += 1;
    }
    prev = std::move(r);
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(changed, 0);
}

TEST_F(VideoTest, EncodeGroupChecksEveryFrameFirst) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  const EncoderInputs in = moving_square_inputs(exec);
  IncrementalEncoder enc(model);
  IncrementalParams ip{.image_width = 192, .image_height = 128};
  enc.encode(in.patches[0], in.positions[0], {}, {}, ip, exec);
  // Frame 1 of the group refers to a row its previous frame (the group's frame 0) does not have.
  std::vector<int64_t> bad = in.prev_row[2];
  bad[0] = in.patches[1].dim(0) + 5;
  const IncrementalFrame g[2] = {{&in.patches[1], &in.positions[1], in.prev_row[1], in.dirty[1]},
                                 {&in.patches[2], &in.positions[2], bad, in.dirty[2]}};
  try {
    enc.encode_group(g, ip, exec);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("frame 1"), std::string::npos) << e.what();
  }
  // Nothing changed: frame 1 still follows frame 0.
  const IncrementalResult r = enc.encode(in.patches[1], in.positions[1], in.prev_row[1], in.dirty[1], ip, exec);
  EXPECT_TRUE(r.approximate);
  EXPECT_TRUE(enc.encode_group({}, ip, exec).empty());
}

// ---- the attention bound ------------------------------------------------------------------------

// A random tower whose attention is contextual, as a trained tower's is: queries and keys scaled
// up so each token attends sharply to a few others (random weights at std 0.02 attend nearly
// uniformly, and then a kept token's stale attention costs nothing).
VitModel contextual_model() {
  VitConfig c;
  c.hidden = 64, c.heads = 4, c.mlp = 128, c.layers = 4, c.grid = 8;
  c.pre_norm = true;
  VitModel model = VitModel::random(c, 11, "contextual");
  // q and k scaled so attention is sharp; v, the output projection and the MLP so that each
  // layer's update is a sizeable part of the residual stream (as in a trained tower, where it
  // is ~half of it), not 2 % of it.
  auto scaled = [](const WeightMatrix& m, int64_t rows, float k) {
    Tensor w(DType::f32, {m.rows, m.cols});
    std::memcpy(w.bytes(), m.data, w.size_bytes());
    for (int64_t i = 0; i < rows * m.cols; ++i) w.data<float>()[i] *= k;
    return WeightMatrix(std::move(w));
  };
  for (VitLayer& l : encoder_detail::ModelAccess::unshared(model).layers) {
    l.qkv_w = scaled(l.qkv_w, 2 * c.hidden, 12);
    l.out_w = scaled(l.out_w, l.out_w.rows, 4);
    l.fc1_w = scaled(l.fc1_w, l.fc1_w.rows, 4);
    l.fc2_w = scaled(l.fc2_w, l.fc2_w.rows, 4);
  }
  return model;
}

// Per frame, the largest relative error of a token's incremental embedding to a full encode's,
// ‖a − b‖₂ / ‖b‖₂.
std::vector<double> errors_to_full(const VitModel& model, const EncoderInputs& in, const IncrementalParams& ip,
                                   size_t group, Executor& exec, std::vector<IncrementalResult>* results = nullptr) {
  IncrementalEncoder enc(model);
  std::vector<IncrementalResult> got;
  for (size_t a = 0; a < in.patches.size(); a += group) {
    std::vector<IncrementalFrame> frames;
    for (size_t f = a; f < std::min(in.patches.size(), a + group); ++f)
      frames.push_back({&in.patches[f], &in.positions[f], in.prev_row[f], in.dirty[f]});
    for (IncrementalResult& r : enc.encode_group(frames, ip, exec)) got.push_back(std::move(r));
  }
  std::vector<double> err;
  const EncodeParams ep{.image_width = ip.image_width, .image_height = ip.image_height};
  for (size_t f = 0; f < got.size(); ++f) {
    const Encoding full = encode(model, in.patches[f], in.positions[f], ep, exec);
    const int64_t n = full.embeddings.dim(0), d = full.embeddings.dim(1);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* a = got[f].embeddings.data<float>() + i * d;
      const float* b = full.embeddings.data<float>() + i * d;
      double ee = 0, bb = 0;
      for (int64_t j = 0; j < d; ++j) ee += (double(a[j]) - b[j]) * (double(a[j]) - b[j]), bb += double(b[j]) * b[j];
      worst = std::max(worst, std::sqrt(ee / bb));
    }
    err.push_back(worst);
  }
  if (results) *results = std::move(got);
  return err;
}

// With both thresholds at 0 the bound recomputes every token whose attention moved at all, from
// the attention it kept up to date (a wrong update would show here): every frame is a full
// encode, frame by frame and in groups, across the layout change at frame 5 (rows dropped and
// added). Eventful reuse at threshold 0 is not: a kept token never sees the moving square's new
// keys.
TEST_F(VideoTest, AttentionBoundAtZeroThresholdIsAFullEncode) {
  Executor exec({.threads = 2});
  const VitModel model = contextual_model();
  const EncoderInputs in = moving_square_inputs(exec);
  IncrementalParams ip{.image_width = 192, .image_height = 128, .token_threshold = 0, .attention_threshold = 0};
  for (const size_t group : {size_t(1), size_t(4)}) {
    SCOPED_TRACE("group " + std::to_string(group));
    std::vector<IncrementalResult> rs;
    const std::vector<double> err = errors_to_full(model, in, ip, group, exec, &rs);
    for (size_t f = 0; f < err.size(); ++f) EXPECT_LT(err[f], 1e-4) << "frame " << f;
    int64_t by_attention = 0;
    for (const IncrementalResult& r : rs) by_attention += r.attention_tokens;
    EXPECT_GT(by_attention, 0);  // the bound did the work, not the input test
  }
  IncrementalParams eventful = ip;
  eventful.bound_attention = false;
  const std::vector<double> err = errors_to_full(model, in, eventful, 1, exec);
  EXPECT_GT(*std::max_element(err.begin(), err.end()), 1e-2);
}

// At the default threshold the bound keeps the error well below Eventful reuse's, and the
// encoder's own estimate says there is error where there is and none where nothing changed.
TEST_F(VideoTest, AttentionBoundKeepsTheErrorBelowEventfulReuse) {
  Executor exec({.threads = 2});
  const VitModel model = contextual_model();
  const EncoderInputs in = moving_square_inputs(exec);
  // The input test exact (threshold 0), so what is left is what each does with attention.
  IncrementalParams ip{.image_width = 192, .image_height = 128, .token_threshold = 0, .attention_threshold = 0.1f};
  std::vector<IncrementalResult> bounded_r, eventful_r;
  const std::vector<double> bounded = errors_to_full(model, in, ip, 1, exec, &bounded_r);
  IncrementalParams eventful = ip;
  eventful.bound_attention = false;
  const std::vector<double> unbounded = errors_to_full(model, in, eventful, 1, exec, &eventful_r);
  double sum_b = 0, sum_u = 0;
  for (size_t f = 1; f < bounded.size(); ++f) sum_b += bounded[f], sum_u += unbounded[f];
  EXPECT_LT(sum_b, 0.7 * sum_u);  // measured: 0.46x
  EXPECT_LT(bounded.back(), 0.7 * unbounded.back());  // Eventful's error grows frame after frame
  for (size_t f = 1; f < bounded_r.size(); ++f) {
    EXPECT_TRUE(bounded_r[f].approximate);
    if (bounded[f] > 1e-3) {
      EXPECT_GT(bounded_r[f].drift_estimate, 0) << "frame " << f;
    }
    EXPECT_GE(bounded_r[f].drift_estimate_max, bounded_r[f].drift_estimate);
  }
  EXPECT_EQ(bounded_r[0].drift_estimate, 0);  // a full encode leaves nothing
  // The same frame again: nothing moved, nothing is left unapplied.
  IncrementalEncoder enc(model);
  enc.encode(in.patches[0], in.positions[0], {}, {}, ip, exec);
  const int64_t N = in.patches[0].dim(0);
  std::vector<int64_t> same(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) same[size_t(i)] = i;
  const std::vector<uint8_t> clean(static_cast<size_t>(N), 0);
  const IncrementalResult again = enc.encode(in.patches[0], in.positions[0], same, clean, ip, exec);
  EXPECT_TRUE(again.approximate);
  EXPECT_LT(again.drift_estimate_max, 1e-6);  // rounding: the class token's keys recomputed
}

// The MLP gate: at threshold 0 only an MLP whose input did not move at all keeps its output, so
// every frame is still a full encode (across the layout change at frame 5, in groups too, and the
// groups bit for bit the frame-by-frame results on the reference kernels); above 0 it saves MLP
// work, the encoder's estimate counts what it left, and the error stays bounded.
TEST_F(VideoTest, MlpGateKeepsTheMlpOutputOfSmallChanges) {
  const VitModel model = contextual_model();
  {
    Executor exec({.threads = 2, .kernels = Kernels::reference});
    const EncoderInputs in = moving_square_inputs(exec);
    IncrementalParams ip{.image_width = 192, .image_height = 128, .token_threshold = 0, .attention_threshold = 0,
                         .mlp_threshold = 0};
    std::vector<IncrementalResult> one, four;
    const std::vector<double> err = errors_to_full(model, in, ip, 1, exec, &one);
    for (size_t f = 0; f < err.size(); ++f) EXPECT_LT(err[f], 1e-4) << "frame " << f;
    errors_to_full(model, in, ip, 4, exec, &four);
    ASSERT_EQ(one.size(), four.size());
    for (size_t f = 0; f < one.size(); ++f) {
      EXPECT_EQ(one[f].layer_tokens, four[f].layer_tokens) << "frame " << f;
      EXPECT_EQ(one[f].flops_fraction, four[f].flops_fraction) << "frame " << f;
      EXPECT_EQ(0, std::memcmp(one[f].embeddings.bytes(), four[f].embeddings.bytes(), one[f].embeddings.size_bytes()))
          << "frame " << f;
    }
  }
  Executor exec({.threads = 2});
  const EncoderInputs in = moving_square_inputs(exec);
  IncrementalParams ip{.image_width = 192, .image_height = 128, .token_threshold = 0.02f};
  std::vector<IncrementalResult> plain_r, gated_r, zero_r;
  const std::vector<double> plain = errors_to_full(model, in, ip, 1, exec, &plain_r);
  ip.mlp_threshold = 0;
  errors_to_full(model, in, ip, 1, exec, &zero_r);
  ip.mlp_threshold = 0.2f;
  const std::vector<double> gated = errors_to_full(model, in, ip, 4, exec, &gated_r);
  double plain_work = 0, gated_work = 0, plain_est = 0, gated_est = 0;
  for (size_t f = 1; f < plain.size(); ++f) {
    EXPECT_NEAR(zero_r[f].flops_fraction, plain_r[f].flops_fraction, 1e-9) << "frame " << f;
    plain_work += plain_r[f].flops_fraction, gated_work += gated_r[f].flops_fraction;
    plain_est += plain_r[f].drift_estimate, gated_est += gated_r[f].drift_estimate;
    EXPECT_LT(gated[f], 0.25) << "frame " << f;
  }
  EXPECT_LT(gated_work, plain_work);
  EXPECT_GT(gated_est, plain_est);
}

// The refresh budget recomputes, per frame and layer, the kept tokens with the largest change
// left unapplied: more work, less error.
TEST_F(VideoTest, RefreshBudgetRecomputesTheStalestTokens) {
  Executor exec({.threads = 2});
  const VitModel model = contextual_model();
  const EncoderInputs in = moving_square_inputs(exec);
  IncrementalParams ip{.image_width = 192, .image_height = 128, .token_threshold = 0.2f};
  std::vector<IncrementalResult> plain_r, budget_r;
  const std::vector<double> plain = errors_to_full(model, in, ip, 1, exec, &plain_r);
  ip.refresh_tokens = 6;
  const std::vector<double> budget = errors_to_full(model, in, ip, 1, exec, &budget_r);
  int64_t plain_work = 0, budget_work = 0;
  double plain_err = 0, budget_err = 0;
  for (size_t f = 1; f < plain.size(); ++f) {
    for (int64_t n : plain_r[f].layer_tokens) plain_work += n;
    for (int64_t n : budget_r[f].layer_tokens) budget_work += n;
    plain_err += plain[f], budget_err += budget[f];
  }
  EXPECT_GT(budget_work, plain_work);
  EXPECT_LT(budget_err, plain_err);
}

// The carry: a token whose input moved below the threshold is not recomputed, but the change
// still goes up the residual stream (its output is its new input plus its kept update), so its
// embedding moves towards the full encode's instead of staying as it was.
TEST_F(VideoTest, ChangesBelowTheThresholdAreCarriedToTheOutput) {
  Executor exec({.threads = 2});
  const VitModel model = contextual_model();
  const EncoderInputs in = moving_square_inputs(exec);
  IncrementalParams ip{.image_width = 192, .image_height = 128, .token_threshold = 0.5f};
  IncrementalEncoder enc(model);
  const IncrementalResult r0 = enc.encode(in.patches[0], in.positions[0], {}, {}, ip, exec);
  // Frame 0 again with one patch a little brighter: below the threshold everywhere.
  Tensor brighter = in.patches[0].clone();
  const int64_t N = brighter.dim(0), K = brighter.numel() / N, tok = N / 2;
  for (int64_t k = 0; k < K; ++k) brighter.data<float>()[tok * K + k] += 0.05f;
  std::vector<int64_t> same(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) same[size_t(i)] = i;
  std::vector<uint8_t> dirty(static_cast<size_t>(N), 0);
  dirty[size_t(tok)] = 1;
  const IncrementalResult r1 = enc.encode(brighter, in.positions[0], same, dirty, ip, exec);
  for (int64_t n : r1.layer_tokens) EXPECT_EQ(n, 0);  // nothing recomputed
  const EncodeParams ep{.image_width = 192, .image_height = 128};
  const Encoding full = encode(model, brighter, in.positions[0], ep, exec);
  const int64_t D = full.embeddings.dim(1);
  auto dist = [&](const Tensor& a) {
    double e = 0;
    for (int64_t d = 0; d < D; ++d) {
      const double x = double(a.data<float>()[tok * D + d]) - full.embeddings.data<float>()[tok * D + d];
      e += x * x;
    }
    return std::sqrt(e);
  };
  EXPECT_GT(dist(r0.embeddings), 0);
  EXPECT_LT(dist(r1.embeddings), 0.7 * dist(r0.embeddings));
}

// The drift refresh: a frame group starts from scratch when the last frame's estimate is above
// the bound; never at 0.
TEST_F(VideoTest, DriftAboveTheBoundRefreshesTheEncoder) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  auto image = [](int f) {
    ImageU8 img = test::gradient_image(160, 96, 3);
    for (int c = 0; c < 3; ++c)
      for (int y = 60; y < 80; ++y)
        for (int x = 8 + 5 * f; x < 24 + 5 * f; ++x) img.at(c, y, x) = 255;
    return img;
  };
  Query q;
  q.fixations.push_back({130, 20});
  for (const float bound : {0.0f, 1e-9f}) {
    VideoParams vp = small_params(30);
    vp.drift_refresh = bound;
    VideoSession session(vp, &model, exec);
    std::vector<std::string> reasons;
    for (int f = 0; f < 6; ++f) {
      const FrameResult r = session.process(image(f), q, f, f / 25.0);
      reasons.push_back(r.refresh ? r.refresh_reason : "-");
      if (r.refresh_reason == "drift") {
        EXPECT_EQ(r.drift_estimate, 0);  // a full encode
      }
    }
    if (bound == 0) {
      EXPECT_EQ(reasons, (std::vector<std::string>{"first", "-", "-", "-", "-", "-"}));
    } else {
      EXPECT_EQ(reasons, (std::vector<std::string>{"first", "-", "drift", "-", "drift", "-"}));
    }
  }
}

// A refresh after a refresh (a pan: every tile changes every frame) is encoded as --reuse exact
// encodes it, without the layer caches reuse would need; the first frame that is not a refresh
// makes them with a full encode, and the frames after it are incremental again.
TEST_F(VideoTest, ConsecutiveRefreshesEncodeAsExactDoes) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  auto image = [](int f) {
    if (f < 4) return test::random_image(160, 96, 3, uint32_t(11 + f));  // a new scene every frame
    ImageU8 img = test::random_image(160, 96, 3, 14);
    if (f == 5)
      for (int c = 0; c < 3; ++c)
        for (int y = 60; y < 76; ++y)
          for (int x = 16; x < 32; ++x) img.at(c, y, x) = 255;
    return img;
  };
  Query q;
  q.fixations.push_back({130, 20});
  std::vector<FrameResult> inc, exa;
  for (const Reuse reuse : {Reuse::incremental, Reuse::exact}) {
    VideoParams vp = small_params(30);
    vp.reuse = reuse;
    VideoSession session(vp, &model, exec);
    for (int f = 0; f < 6; ++f) (reuse == Reuse::incremental ? inc : exa).push_back(session.process(image(f), q, f, f / 25.0));
  }
  for (int f = 1; f < 4; ++f) {
    ASSERT_TRUE(inc[size_t(f)].refresh) << f;
    EXPECT_FALSE(inc[size_t(f)].approximate) << f;
    ASSERT_EQ(inc[size_t(f)].embeddings.numel(), exa[size_t(f)].embeddings.numel());
    EXPECT_EQ(max_abs_diff(inc[size_t(f)].embeddings, exa[size_t(f)].embeddings), 0) << f;
  }
  EXPECT_FALSE(inc[4].refresh);
  EXPECT_EQ(inc[4].encoder_work, 1);  // the caches made again: a full encode
  EXPECT_FALSE(inc[5].refresh);
  EXPECT_LT(inc[5].encoder_work, 1);  // and reuse from there on
}

// A pan: frames cropped from one large scene at moving offsets. When the camera moved by whole
// patches, the tokens whose patch is the previous frame's at the shifted place keep its patch
// embedding (the position embedding added is the new one); every layer runs again. Every frame,
// shifted by whole patches or not, is bit for bit what --reuse off gives.
TEST_F(VideoTest, PanReusesShiftedPatchEmbeddingsExactly) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  const ImageU8 scene = test::random_image(400, 300, 3, 23);
  constexpr int W = 224, H = 160;
  // (x, y) of each frame in the scene: whole-patch moves (16, 32 px: a level-1 tile), then
  // moves of 3 and 5 px (nothing lines up), then whole patches again from there.
  const std::vector<std::pair<int, int>> at = {{0, 0},   {16, 0},  {48, 32}, {51, 32},
                                               {51, 37}, {67, 37}, {35, 53}, {35, 53}};
  auto frame = [&](int f) {
    ImageU8 img(W, H, 3);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < H; ++y)
        std::memcpy(img.row(c, y), scene.row(c, y + at[size_t(f)].second) + at[size_t(f)].first, W);
    return img;
  };
  Query q;
  q.fixations.push_back({150, 50});
  std::map<Reuse, std::vector<FrameResult>> runs;
  for (const Reuse reuse : {Reuse::off, Reuse::exact, Reuse::incremental}) {
    VideoParams vp = small_params(60);
    vp.reuse = reuse;
    VideoSession session(vp, &model, exec);
    for (int f = 0; f < int(at.size()); ++f) runs[reuse].push_back(session.process(frame(f), q, f, f / 25.0));
  }
  const std::vector<FrameResult>& off = runs[Reuse::off];
  int64_t reused_total = 0;
  for (const Reuse reuse : {Reuse::exact, Reuse::incremental}) {
    const std::vector<FrameResult>& run = runs[reuse];
    for (size_t f = 0; f < at.size(); ++f) {
      const FrameResult& r = run[f];
      const bool whole = f > 0 && at[f] != at[f - 1] && (at[f].first - at[f - 1].first) % 16 == 0 &&
                         (at[f].second - at[f - 1].second) % 16 == 0;
      ASSERT_EQ(r.batch.size(), off[f].batch.size()) << f;
      ASSERT_EQ(0, std::memcmp(r.batch.positions.bytes(), off[f].batch.positions.bytes(),
                               r.batch.positions.size_bytes())) << f;
      if (whole) {
        EXPECT_EQ(r.refresh_reason, "shift") << f;
        EXPECT_FALSE(r.approximate) << f;
        // The tokens that keep the previous frame's patch (and so its patch embedding); with
        // --reuse exact they are the tokens not recomputed.
        const int64_t reused = r.batch.size() - r.resampled_tokens;
        if (reuse == Reuse::exact) {
          EXPECT_EQ(r.recomputed_tokens, r.resampled_tokens) << f;
        }
        EXPECT_GT(reused, 0) << f;
        EXPECT_LT(reused, r.batch.size()) << f;  // the newly uncovered edge is new
        reused_total += reused;
        // The reused rows point at the previous frame's token under the same scene point.
        for (int64_t i = 0; i < r.batch.size(); ++i) {
          if (r.previous_row[size_t(i)] < 0) continue;
          const int64_t p = r.previous_row[size_t(i)];
          const size_t row = size_t(r.batch.patches.size_bytes() / r.batch.size());
          EXPECT_EQ(0, std::memcmp(r.batch.patches.bytes() + size_t(i) * row,
                                   run[f - 1].batch.patches.bytes() + size_t(p) * row, row));
        }
      } else if (f > 0 && at[f] != at[f - 1]) {
        EXPECT_EQ(r.resampled_tokens, r.batch.size()) << f;  // no whole-patch shift: nothing lines up
      }
      if (at[f] != (f > 0 ? at[f - 1] : at[f]) || f == 0) {
        EXPECT_EQ(max_abs_diff(r.embeddings, off[f].embeddings), 0) << to_string(reuse) << " frame " << f;
      }
    }
  }
  EXPECT_GT(reused_total, 0);
}

// The session in groups: results in order, a refresh alone, embeddings as frame by frame.
TEST_F(VideoTest, SessionGroupsGiveTheFrameByFrameResults) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  VideoParams vp = small_params(30);
  vp.keyframe_interval = 6;
  vp.exact_above_work = 0;  // decided between groups: G = 1 and G = 4 would switch at other frames
  auto image = [](int f) {
    ImageU8 img = test::gradient_image(160, 96, 3);
    for (int c = 0; c < 3; ++c)
      for (int y = 60; y < 80; ++y)
        for (int x = 8 + 5 * f; x < 24 + 5 * f; ++x) img.at(c, y, x) = 255;
    return img;
  };
  Query q;
  q.fixations.push_back({130, 20});
  VideoSession single(vp, &model, exec);
  std::vector<FrameResult> base;
  for (int f = 0; f < 11; ++f) base.push_back(single.process(image(f), q, f, f / 25.0));
  vp.group_frames = 4;
  VideoSession grouped(vp, &model, exec);
  std::vector<FrameResult> got;
  std::vector<size_t> out_after;  // results out after each push
  for (int f = 0; f < 11; ++f) {
    for (FrameResult& r : grouped.push(image(f), q, f, f / 25.0)) got.push_back(std::move(r));
    out_after.push_back(got.size());
  }
  EXPECT_EQ(grouped.pending_frames(), 11 - int64_t(got.size()));
  for (FrameResult& r : grouped.flush()) got.push_back(std::move(r));
  EXPECT_EQ(grouped.pending_frames(), 0);
  // Frame 0 (first) and 6 (keyframe) are refreshes, each a group of one; 1–4 and 7–10 are groups
  // of 4; frame 5, pending when the keyframe came, went through alone.
  EXPECT_EQ(out_after, (std::vector<size_t>{1, 1, 1, 1, 5, 5, 7, 7, 7, 7, 11}));
  ASSERT_EQ(got.size(), base.size());
  for (size_t f = 0; f < got.size(); ++f) {
    SCOPED_TRACE("frame " + std::to_string(f));
    EXPECT_EQ(got[f].index, int64_t(f));
    EXPECT_EQ(got[f].refresh, base[f].refresh);
    EXPECT_EQ(got[f].group_frames, f == 0 || f == 5 || f == 6 ? 1 : 4);
    EXPECT_EQ(got[f].recomputed, base[f].recomputed);
    ASSERT_NE(got[f].allocation, nullptr);
    EXPECT_EQ(got[f].allocation->layout.tokens.size(), size_t(got[f].batch.size()));
    EXPECT_LT(max_abs_diff(got[f].embeddings, base[f].embeddings), 1e-5);
    // The patches too, bit for bit: a pending frame's clean tokens copy the pending frame
    // before it, not the session's copy of the last frame out.
    ASSERT_EQ(got[f].batch.patches.size_bytes(), base[f].batch.patches.size_bytes());
    EXPECT_EQ(std::memcmp(got[f].batch.patches.bytes(), base[f].batch.patches.bytes(),
                          base[f].batch.patches.size_bytes()),
              0);
  }
  // process() refuses to run with frames pending.
  (void)grouped.push(image(11), q, 11, 0.44);
  EXPECT_THROW(grouped.process(image(12), q, 12, 0.48), Error);
}

// When a group's incremental encode does most of a full encode's work (here every token is
// recomputed: threshold 0), the next three groups are encoded exactly (every layer on every
// token, the embeddings of a full encode of the same tokens), and then reuse is tried again.
TEST_F(VideoTest, HeavyChangeIsEncodedExactlyForThreeGroupsAndWhileItLasts) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  VideoParams vp = small_params(30);
  vp.group_frames = 2;
  vp.encoder.token_threshold = 0;
  // The sprite moves until frame 10, then stays.
  auto image = [](int f) {
    f = std::min(f, 10);
    ImageU8 img = test::gradient_image(160, 96, 3);
    for (int c = 0; c < 3; ++c)
      for (int y = 60; y < 80; ++y)
        for (int x = 8 + 5 * f; x < 24 + 5 * f; ++x) img.at(c, y, x) = 255;
    return img;
  };
  Query q;
  q.fixations.push_back({130, 20});
  VideoSession session(vp, &model, exec);
  VideoParams ve = vp;
  ve.reuse = Reuse::exact;
  VideoSession exact(ve, &model, exec);
  std::vector<FrameResult> got, ref;
  for (int f = 0; f < 13; ++f) {
    for (FrameResult& r : session.push(image(f), q, f, f / 25.0)) got.push_back(std::move(r));
    ref.push_back(exact.process(image(f), q, f, f / 25.0));
  }
  for (FrameResult& r : session.flush()) got.push_back(std::move(r));
  ASSERT_EQ(got.size(), 13u);
  // Frame 0 is the first refresh; frames 1-2 are reused, with nearly a full encode's work.
  EXPECT_TRUE(got[0].refresh);
  for (int f = 1; f <= 2; ++f) {
    EXPECT_FALSE(got[f].refresh);
    EXPECT_TRUE(got[f].approximate);
    EXPECT_GT(got[f].encoder_work, 0.45);
  }
  // Frames 3-8 (three groups of two): exact, as --reuse exact encodes the same tokens.
  for (int f = 3; f <= 8; ++f) {
    SCOPED_TRACE("frame " + std::to_string(f));
    EXPECT_FALSE(got[f].refresh);
    EXPECT_FALSE(got[f].approximate);
    EXPECT_DOUBLE_EQ(got[f].encoder_work, 1.0);
    ASSERT_EQ(got[f].batch.positions.size_bytes(), ref[f].batch.positions.size_bytes());
    EXPECT_EQ(std::memcmp(got[f].batch.positions.bytes(), ref[f].batch.positions.bytes(),
                          ref[f].batch.positions.size_bytes()),
              0);
    EXPECT_LT(max_abs_diff(got[f].embeddings, ref[f].embeddings), 1e-4);
  }
  // Frames 9-10: the sprite moves as much as in frames 1-2 (as many patches sampled again), so
  // reuse would cost as much: still exact.
  for (int f = 9; f <= 10; ++f) {
    SCOPED_TRACE("frame " + std::to_string(f));
    EXPECT_FALSE(got[f].approximate);
    EXPECT_DOUBLE_EQ(got[f].encoder_work, 1.0);
    EXPECT_LT(max_abs_diff(got[f].embeddings, ref[f].embeddings), 1e-4);
  }
  // Frames 11-12: the sprite stopped; reuse again (the group's first frame makes the layer
  // caches with a full encode).
  EXPECT_FALSE(got[11].approximate);
  EXPECT_TRUE(got[12].approximate);
  // A share that is not a finite number >= 0 is refused.
  for (float bad : {-0.1f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    VideoParams b = vp;
    b.exact_above_work = bad;
    EXPECT_THROW(VideoSession(b, &model, exec), Error);
  }
}

// Inside a group, a token whose tile changed in the frame before and not since keeps the
// patch of the frame before: the pending frame's own (the session hands each frame's patches
// to its result uncopied and keeps only the group's last). An object appears at frame 1 and
// stays: frames 2.. of the group must copy its patches from frame 1, not from frame 0.
TEST_F(VideoTest, GroupedFramesKeepThePatchesOfThePendingFrameBefore) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  VideoParams vp = small_params(30);
  auto image = [](int f) {
    ImageU8 img = test::gradient_image(160, 96, 3);
    if (f >= 1)
      for (int c = 0; c < 3; ++c)
        for (int y = 40; y < 56; ++y)
          for (int x = 40; x < 72; ++x) img.at(c, y, x) = uint8_t(200 - 60 * c);
    return img;
  };
  Query q;
  q.fixations.push_back({56, 48});  // on the object: fine tokens over it
  vp.exact_above_work = 0;  // decided between groups: G = 1 and G = 5 would switch at other frames
  VideoSession single(vp, &model, exec);
  std::vector<FrameResult> base;
  for (int f = 0; f < 6; ++f) base.push_back(single.process(image(f), q, f, f / 25.0));
  vp.group_frames = 5;
  VideoSession grouped(vp, &model, exec);
  std::vector<FrameResult> got;
  for (int f = 0; f < 6; ++f)
    for (FrameResult& r : grouped.push(image(f), q, f, f / 25.0)) got.push_back(std::move(r));
  for (FrameResult& r : grouped.flush()) got.push_back(std::move(r));
  ASSERT_EQ(got.size(), base.size());
  EXPECT_EQ(got[3].group_frames, 5);
  EXPECT_GT(base[1].resampled_tokens, 0);  // the object's tokens, sampled again at frame 1
  EXPECT_EQ(base[2].resampled_tokens, 0);  // and kept from then on
  for (size_t f = 0; f < got.size(); ++f) {
    SCOPED_TRACE("frame " + std::to_string(f));
    ASSERT_EQ(got[f].batch.patches.size_bytes(), base[f].batch.patches.size_bytes());
    EXPECT_EQ(std::memcmp(got[f].batch.patches.bytes(), base[f].batch.patches.bytes(),
                          base[f].batch.patches.size_bytes()),
              0);
    EXPECT_LT(max_abs_diff(got[f].embeddings, base[f].embeddings), 1e-5);
  }
  // The session's copy after the group is the last frame's: a frame pushed now keeps its patches.
  std::vector<FrameResult> next = grouped.push(image(6), q, 6, 6 / 25.0);
  for (FrameResult& r : grouped.flush()) next.push_back(std::move(r));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].resampled_tokens, 0);
  ASSERT_EQ(next[0].batch.patches.size_bytes(), base[5].batch.patches.size_bytes());
  EXPECT_EQ(std::memcmp(next[0].batch.patches.bytes(), base[5].batch.patches.bytes(),
                        base[5].batch.patches.size_bytes()),
            0);
}

// run_video (the loop of `fovea video` and fovea.video()): the file holds exactly the frames a
// hand-written push/flush loop gets, in order; the filter, max_frames, per-frame queries and
// hooks are honoured; no frame or a throwing hook leaves no file.
TEST_F(VideoTest, RunVideoWritesWhatTheSessionGives) {
  Executor exec({.threads = 2});
  const VitModel model = VitModel::load("random:vit-tiny");
  VideoParams vp = small_params(16);
  vp.group_frames = 3;
  auto keep = [](int64_t i, double) { return i % 2 == 0; };
  auto query_of = [](int64_t index) {
    Query q;
    q.fixations.push_back({index < 6 ? 30.0f : 120.0f, 40});  // a fixation move at frame 6
    return q;
  };
  // By hand.
  std::vector<FrameResult> want;
  {
    VideoReader reader = VideoReader::open(fixture("small.mp4"));
    VideoSession session(vp, &model, exec);
    VideoFrame f;
    int n = 0;
    while (n < 5 && reader.read(f, keep)) {
      for (FrameResult& r : session.push(std::move(f.image), query_of(f.index), f.index, f.pts_s, &f.image))
        want.push_back(std::move(r));
      ++n;
    }
    for (FrameResult& r : session.flush()) want.push_back(std::move(r));
  }
  ASSERT_EQ(want.size(), 5u);
  const std::string dir = test::temp_dir("video_run");
  const std::string out = dir + "/r.safetensors";
  VideoReader reader = VideoReader::open(fixture("small.mp4"));
  VideoSession session(vp, &model, exec);
  VideoRunOptions o;
  o.source = fixture("small.mp4");
  o.max_frames = 5;
  o.keep = keep;
  o.frame_query = [&](const VideoFrame& f) { return query_of(f.index); };
  o.output = out;
  o.model_name = "random:vit-tiny";
  std::vector<int64_t> inputs, results;
  int pushes = 0;
  o.on_input = [&](const VideoFrame& f, const Query& q) {
    inputs.push_back(f.index);
    EXPECT_EQ(q.fixations.at(0).x_px, query_of(f.index).fixations[0].x_px);
  };
  o.after_push = [&] { ++pushes; };
  const VideoRunStats st = run_video(reader, session, o, [&](FrameResult& r, const VideoRunStats& so_far) {
    results.push_back(r.index);
    EXPECT_EQ(so_far.frames, int64_t(results.size()));
    EXPECT_TRUE(fs::exists(out) == false);  // the file appears only once complete
  });
  EXPECT_EQ(inputs, (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(results, inputs);
  EXPECT_EQ(pushes, 5);
  EXPECT_EQ(st.frames, 5);
  int64_t tokens = 0, recomputed = 0;
  for (const FrameResult& r : want) tokens += r.batch.size(), recomputed += r.recomputed_tokens;
  EXPECT_EQ(st.tokens, tokens);
  EXPECT_EQ(st.recomputed_tokens, recomputed);
  EXPECT_TRUE(st.approximate);
  const SafetensorsFile file = SafetensorsFile::open(out);
  const Tensor off = file.load(*file.find("frame_offsets"));
  const Tensor emb = file.load(*file.find("embeddings"));
  const Tensor pos = file.load(*file.find("positions"));
  const Tensor rec = file.load(*file.find("recomputed"));
  const Tensor pts = file.load(*file.find("pts"));
  ASSERT_EQ(off.numel(), 6);
  for (size_t f = 0; f < want.size(); ++f) {
    SCOPED_TRACE("frame " + std::to_string(f));
    const int64_t a = off.data<int64_t>()[f], b = off.data<int64_t>()[f + 1];
    ASSERT_EQ(b - a, want[f].batch.size());
    EXPECT_EQ(pts.data<double>()[f], want[f].pts_s);
    EXPECT_EQ(0, std::memcmp(emb.data<float>() + a * emb.dim(1), want[f].embeddings.bytes(),
                             want[f].embeddings.size_bytes()));
    EXPECT_EQ(0, std::memcmp(pos.data<float>() + a * 4, want[f].batch.positions.bytes(),
                             want[f].batch.positions.size_bytes()));
    EXPECT_EQ(0, std::memcmp(rec.data<uint8_t>() + a, want[f].recomputed.data(), want[f].recomputed.size()));
  }
  EXPECT_EQ(file.metadata(), video_metadata(vp, {.source = o.source, .info = reader.info(), .frames = 5,
                                                 .approximate = true},
                                            &model, "random:vit-tiny", ""));
  // Nothing kept: an error naming the source, and no file.
  const std::string out2 = dir + "/none.safetensors";
  {
    VideoReader r2 = VideoReader::open(fixture("small.mp4"));
    VideoSession s2(vp, &model, exec);
    VideoRunOptions o2 = o;
    o2.output = out2;
    o2.keep = [](int64_t, double) { return false; };
    try {
      (void)run_video(r2, s2, o2);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::corrupt_data);
      EXPECT_NE(std::string(e.what()).find("small.mp4: no frame could be decoded"), std::string::npos) << e.what();
    }
  }
  // A hook that throws ends the run; the file is not written.
  {
    VideoReader r3 = VideoReader::open(fixture("small.mp4"));
    VideoSession s3(vp, &model, exec);
    VideoRunOptions o3 = o;
    o3.output = out2;
    int calls = 0;
    o3.after_push = [&] {
      if (++calls == 4) throw Error(Errc::internal, "stop");
    };
    EXPECT_THROW((void)run_video(r3, s3, o3), Error);
  }
  EXPECT_FALSE(fs::exists(out2));
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos);
}

// ---- reader ---------------------------------------------------------------------------------

TEST_F(VideoTest, FrameOrderAndPtsArePreserved) {
  const std::string dir = test::temp_dir("video_order");
  const std::string path = dir + "/clip.y4m";
  test::write_y4m(path, 64, 48, 30, 30000, 1001);
  VideoReader reader = VideoReader::open(path);
  EXPECT_EQ(reader.info().width, 64);
  EXPECT_EQ(reader.info().height, 48);
  EXPECT_NEAR(reader.info().fps, 30000.0 / 1001, 1e-6);
  VideoFrame f;
  int n = 0;
  while (reader.read(f)) {
    EXPECT_EQ(f.index, n);
    EXPECT_NEAR(f.pts_s, n * 1001.0 / 30000, 1e-6);
    ASSERT_EQ(f.image.channels(), 3);
    // Luma 16 + 5n (limited range) back to RGB grey: (Y − 16)·255/219.
    const double expect = (5.0 * n) * 255 / 219;
    EXPECT_NEAR(f.image.at(1, 40, 40), expect, 2.0) << "frame " << n;
    EXPECT_GT(f.image.at(0, 2, (4 * n) % 64 + 2), 230) << "frame " << n;
    ++n;
  }
  EXPECT_EQ(n, 30);
  EXPECT_EQ(reader.corrupt_packets(), 0);
  // A filter keeps every third frame, in order, with their own pts.
  VideoReader r2 = VideoReader::open(path);
  std::vector<int64_t> kept;
  while (r2.read(f, [](int64_t i, double) { return i % 3 == 0; })) kept.push_back(f.index);
  EXPECT_EQ(kept, (std::vector<int64_t>{0, 3, 6, 9, 12, 15, 18, 21, 24, 27}));
  EXPECT_EQ(r2.frames_decoded(), 30);
}

TEST_F(VideoTest, ReadingALongClipHoldsBoundedMemory) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FOVEA_TEST_UNDER_ASAN 1  // clang
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(FOVEA_TEST_UNDER_ASAN)  // gcc, clang
  // ASan keeps freed blocks in its quarantine (up to 256 MiB) so that late uses are caught: the
  // RSS then measures ASan, not the reader. The plain suite checks the bound.
  GTEST_SKIP() << "RSS under AddressSanitizer includes its quarantine";
#endif
  const std::string dir = test::temp_dir("video_long");
  const std::string path = dir + "/long.y4m";
  const int W = 320, H = 240, F = 400;  // 92 MB of RGB frames if they were all held
  test::write_y4m(path, W, H, F, 25, 1);
  VideoReader reader = VideoReader::open(path);
  VideoFrame f;
  int n = 0;
  int64_t base = -1, peak = 0;
  while (reader.read(f)) {
    if (++n == 10) base = rss_kib();
    if (n > 10) peak = std::max(peak, rss_kib());
  }
  EXPECT_EQ(n, F);
  ASSERT_GT(base, 0);
  EXPECT_LT(peak - base, 16 * 1024) << "RSS grew by " << (peak - base) << " KiB over " << F << " frames";
  fs::remove(path);
}

TEST_F(VideoTest, BadInputsGiveClearErrors) {
  const std::string dir = test::temp_dir("video_bad");
  auto code_of = [](const std::string& p) {
    try {
      VideoReader::open(p);
    } catch (const Error& e) {
      return std::pair<Errc, std::string>(e.code(), e.what());
    }
    return std::pair<Errc, std::string>(Errc::internal, "opened");
  };
  EXPECT_EQ(code_of(dir + "/missing.mp4").first, Errc::io);
  {
    std::ofstream(dir + "/notes.txt") << "this is not a video, just some text\n";
  }
  auto [c1, m1] = code_of(dir + "/notes.txt");
  EXPECT_EQ(c1, Errc::corrupt_data) << m1;
  EXPECT_NE(m1.find("notes.txt"), std::string::npos);
  {  // a WAV file: audio, no video stream
    std::ofstream w(dir + "/tone.wav", std::ios::binary);
    const uint32_t rate = 8000, n = 8000;
    auto u32 = [&](uint32_t v) { w.write(reinterpret_cast<const char*>(&v), 4); };
    auto u16 = [&](uint16_t v) { w.write(reinterpret_cast<const char*>(&v), 2); };
    w << "RIFF";
    u32(36 + n * 2);
    w << "WAVEfmt ";
    u32(16), u16(1), u16(1), u32(rate), u32(rate * 2), u16(2), u16(16);
    w << "data";
    u32(n * 2);
    for (uint32_t i = 0; i < n; ++i) u16(uint16_t(int16_t(1000 * std::sin(i * 0.1))));
  }
  auto [c2, m2] = code_of(dir + "/tone.wav");
  EXPECT_EQ(c2, Errc::unsupported) << m2;
  EXPECT_NE(m2.find("no video stream"), std::string::npos) << m2;
}

TEST_F(VideoTest, CorruptPacketsAreSkippedAndCounted) {
  for (const char* name : {"small.avi", "small.mp4"}) {
    SCOPED_TRACE(name);
    const std::string dir = test::temp_dir("video_corrupt");
    std::vector<uint8_t> bytes = read_file(fixture(name));
    // Garbage over the middle third of the file (packets, not the headers or the mp4 index).
    uint32_t s = 99;
    for (size_t i = bytes.size() * 4 / 10; i < bytes.size() * 6 / 10; ++i) {
      s ^= s << 13, s ^= s >> 17, s ^= s << 5;
      bytes[i] = uint8_t(s);
    }
    const std::string path = dir + "/bad_" + name;
    write_file_atomic(path, bytes);
    VideoReader reader = VideoReader::open(path);
    VideoFrame f;
    int n = 0;
    int64_t last = -1;
    while (reader.read(f)) {
      EXPECT_GT(f.index, last);
      last = f.index;
      ++n;
    }
    EXPECT_GT(n, 2);  // the run goes on past the damage
    EXPECT_GT(reader.corrupt_packets() + reader.corrupt_frames(), 0);
  }
}

// ---- CLI ------------------------------------------------------------------------------------

TEST_F(VideoTest, CliWritesOneFileWithFramesInOrder) {
  const std::string dir = test::temp_dir("video_cli");
  const std::string out = dir + "/v.safetensors";
  const auto r = test::run_cli({"video", fixture("small.mp4"), "--budget", "12", "--fixation", "30,30", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["frames"], 12);
  const SafetensorsFile f = SafetensorsFile::open(out);
  const Tensor off = f.load(*f.find("frame_offsets"));
  const Tensor pts = f.load(*f.find("pts"));
  ASSERT_EQ(off.numel(), 13);
  ASSERT_EQ(pts.numel(), 12);
  const auto* patches = f.find("patches");
  ASSERT_NE(patches, nullptr);
  EXPECT_EQ(patches->shape[0], off.data<int64_t>()[12]);
  EXPECT_EQ(f.find("recomputed")->shape[0], off.data<int64_t>()[12]);
  for (int i = 0; i < 12; ++i) {
    EXPECT_LE(off.data<int64_t>()[i], off.data<int64_t>()[i + 1]);
    EXPECT_NEAR(pts.data<double>()[i], i / 25.0, 1e-6);
    EXPECT_EQ(s["per_frame"][i]["index"], i);
  }
  EXPECT_EQ(f.metadata().at("reuse"), "exact");
}

TEST_F(VideoTest, CliIncrementalWithCheckAndStore) {
  const std::string dir = test::temp_dir("video_cli_model");
  const std::string out = dir + "/e.safetensors";
  const auto r = test::run_cli({"video", fixture("small.avi"), "--model", "random:vit-s16", "--budget", "16",
                                "--fixation", "130,20", "--check", "--store", "host", "--every", "2", "-o", out,
                                "--json", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["frames"], 6);
  EXPECT_EQ(s["reuse"], "incremental");
  EXPECT_EQ(s["approximate"], true);
  // By default the token threshold / 0.7.
  EXPECT_NEAR(s["encoder"]["attention_threshold"].get<double>(), 0.1, 1e-6);
  EXPECT_EQ(s["encoder"]["mlp_threshold"], "off");  // the MLP gate is off by default
  for (const auto& f : s["per_frame"]) {
    EXPECT_EQ(f["index"].get<int>() % 2, 0);
    EXPECT_GT(f["full_ms"].get<double>(), 0);
    EXPECT_GT(f["cosine"].get<double>(), 0.9);
    EXPECT_LE(f["cosine_min_token"].get<double>(), f["cosine"].get<double>() + 1e-12);  // the worst token
    EXPECT_GT(f["cosine_min_token"].get<double>(), 0.5);
    EXPECT_GE(f["error_max"].get<double>(), f["error_mean"].get<double>());
    // The encoder's own estimate beside the measured error, on every reusing frame.
    if (!f["refresh"].get<bool>()) {
      EXPECT_GE(f["drift_estimate_max"].get<double>(), f["drift_estimate"].get<double>());
    }
    EXPECT_TRUE(f.contains("store"));
    EXPECT_LE(f["recomputed_tokens"].get<int>(), f["tokens"].get<int>());
  }
  const SafetensorsFile f = SafetensorsFile::open(out);
  EXPECT_EQ(f.find("embeddings")->shape[1], 384);
  EXPECT_EQ(f.metadata().at("approximate"), "true");
  EXPECT_EQ(f.metadata().at("random_weights"), "true");
  EXPECT_EQ(f.find("projected"), nullptr);  // no projector
}

TEST_F(VideoTest, CliWritesTheProjectorsOutputForLlava) {
  const std::string dir = test::temp_dir("video_cli_llava");
  const std::string out = dir + "/p.safetensors";
  const auto r = test::run_cli({"video", fixture("small.mp4"), "--model",
                                test::source_dir() + "/tests/data/encoder/hf_llava", "--budget", "30", "--fixation",
                                "30,30", "--group", "4", "-o", out, "--json", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile f = SafetensorsFile::open(out);
  const auto* emb = f.find("embeddings");
  const auto* proj = f.find("projected");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->shape[0], emb->shape[0]);
  EXPECT_EQ(proj->shape[1], 40);  // the fixture's text hidden size
  const nlohmann::json s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["group_frames"], 4);
  EXPECT_EQ(s["per_frame"][1]["group_frames"], 4);
}

// The model brings its preprocessing: fovea video applies the model's mean/std as
// fovea encode does (SigLIP's 0.5, not CLIP's defaults), records it, and --mean overrides it.
// Frame 0 is a full encode, so its embeddings equal fovea encode's of the same frame.
TEST_F(VideoTest, CliAppliesTheModelsPreprocessingAsEncodeDoes) {
  const std::string dir = test::temp_dir("video_cli_prep");
  const std::string model = test::source_dir() + "/tests/data/encoder/siglip";
  const std::string out = dir + "/v.safetensors";
  const auto r = test::run_cli({"video", fixture("small.mp4"), "--model", model, "--budget", "16", "--fixation",
                                "30,30", "--max-frames", "2", "-o", out, "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile v = SafetensorsFile::open(out);
  EXPECT_EQ(v.metadata().at("norm_mean"), "0.5,0.5,0.5");
  EXPECT_EQ(v.metadata().at("norm_std"), "0.5,0.5,0.5");
  EXPECT_EQ(v.metadata().at("preprocessing_source").rfind("model:", 0), 0u) << v.metadata().at("preprocessing_source");

  // Frame 0 as a PNG, encoded by fovea encode with the same query.
  VideoReader reader = VideoReader::open(fixture("small.mp4"));
  VideoFrame f0;
  ASSERT_TRUE(reader.read(f0));
  const std::string png = dir + "/f0.png";
  save_png(f0.image, png);
  const std::string enc = dir + "/e.safetensors";
  // Video runs the mixed foveation; encode's default for a checkpoint is windows.
  const auto e = test::run_cli({"encode", png, "--model", model, "--budget", "16", "--fixation", "30,30", "-o", enc,
                                "--threads", "1", "--foveation", "mixed"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const EmbeddingsFile ef = load_embeddings(enc);
  const Tensor rows = v.load(*v.find("embeddings"));
  const Tensor offsets = v.load(*v.find("frame_offsets"));
  const int64_t n0 = offsets.data<int64_t>()[1];
  ASSERT_EQ(n0, ef.embeddings.dim(0));
  const int64_t d = ef.embeddings.dim(1);
  double worst = 1;
  for (int64_t i = 0; i < n0; ++i) {
    const float* a = rows.data<float>() + i * d;
    const float* b = ef.embeddings.data<float>() + i * d;
    double ab = 0, aa = 0, bb = 0;
    for (int64_t k = 0; k < d; ++k) ab += double(a[k]) * b[k], aa += double(a[k]) * a[k], bb += double(b[k]) * b[k];
    worst = std::min(worst, ab / std::sqrt(aa * bb + 1e-30));
  }
  EXPECT_GT(worst, 0.9999);

  const auto o = test::run_cli({"video", fixture("small.mp4"), "--model", model, "--budget", "16", "--mean",
                                "0.25,0.25,0.25", "--max-frames", "1", "-o", out, "--threads", "1"});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const SafetensorsFile v2 = SafetensorsFile::open(out);
  EXPECT_EQ(v2.metadata().at("norm_mean"), "0.25,0.25,0.25");
  EXPECT_EQ(v2.metadata().at("norm_std"), "0.5,0.5,0.5");
}

TEST_F(VideoTest, CliBadInputIsOneLineAndNoFile) {
  const std::string dir = test::temp_dir("video_cli_bad");
  {
    std::ofstream(dir + "/x.mp4") << "not a video";
  }
  const std::string out = dir + "/o.safetensors";
  auto r = test::run_cli({"video", dir + "/x.mp4", "-o", out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("fovea: error:", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos);
  r = test::run_cli({"video", fixture("small.mp4"), "--reuse", "sometimes", "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  r = test::run_cli({"video", fixture("small.mp4"), "--check", "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  r = test::run_cli({"video", fixture("small.mp4"), "--model", "random:vit-tiny", "--group", "0", "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "fovea: error: --group must be 1..1024 frames\n");
  r = test::run_cli({"video", fixture("small.mp4"), "--model", "random:vit-tiny", "--attention-threshold", "often",
                     "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "fovea: error: --attention-threshold must be a number >= 0 or off\n");
  for (const char* bad : {"-0.1", "sometimes", "nan"}) {
    r = test::run_cli({"video", fixture("small.mp4"), "--model", "random:vit-tiny", "--mlp-threshold", bad, "-o", out});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(r.err, "fovea: error: --mlp-threshold must be a number >= 0 or off\n") << bad;
  }
  r = test::run_cli({"video", fixture("small.mp4"), "--model", "random:vit-tiny", "--refresh-tokens", "-1", "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "fovea: error: --refresh-tokens must be >= 0\n");
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace fovea
