// Several images in one encode, and the windows foveation's encode: every window is what the tower
// computes for it as a standalone native image.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fovea/embeddings.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tokenize.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

std::string fixture(const std::string& model) {
  const std::string f = model.rfind("gguf_", 0) == 0 ? "mmproj.gguf" : "model.safetensors";
  return test::source_dir() + "/tests/data/encoder/" + model + "/" + f;
}

double row_cosine(const float* a, const float* b, int64_t d) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t k = 0; k < d; ++k) ab += double(a[k]) * b[k], aa += double(a[k]) * a[k], bb += double(b[k]) * b[k];
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  double m = 0, scale = 1e-6;
  for (int64_t i = 0; i < a.numel(); ++i) scale = std::max(scale, double(std::fabs(b.data<float>()[i])));
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return m / scale;
}

TokenizeParams params_for(const VitModel& m, Foveation f, int budget, bool keep_covered = false) {
  TokenizeParams p;
  p.patch_px = m.config().patch_px;
  p.extract.norm = normalization(m.config().input);
  p.foveation = f;
  p.windows.grid = m.config().grid;
  p.windows.keep_covered = keep_covered;
  p.alloc.budget_tokens = budget;
  return p;
}

TEST(EncoderBatch, EachImageEqualsItsOwnEncode) {
  for (const std::string name : {"hf_vit", "siglip", "hf_dinov2_reg", "gguf_llava", "clip"}) {
    SCOPED_TRACE(name);
    const VitModel m = VitModel::load(fixture(name));
    Executor exec({.threads = 2});
    std::vector<Tokenization> ts;
    ts.push_back(tokenize(test::random_image(120, 90, 3, 1), {}, params_for(m, Foveation::mixed, 40), exec));
    TokenizeParams u = params_for(m, Foveation::mixed, 30);
    u.uniform = true;
    ts.push_back(tokenize(test::random_image(70, 100, 3, 2), {}, u, exec));
    ts.push_back(tokenize(test::random_image(64, 64, 3, 3), {}, params_for(m, Foveation::mixed, 9), exec));
    // One batch of the three: patches and positions side by side.
    int64_t n = 0;
    for (const auto& t : ts) n += t.batch.size();
    const int P = m.config().patch_px;
    Tensor patches(DType::f32, {n, 3, P, P}), positions(DType::f32, {n, 4});
    std::vector<ImageSpan> spans;
    int64_t r = 0;
    for (const auto& t : ts) {
      std::memcpy(patches.data<float>() + r * 3 * P * P, t.batch.patches.data<float>(), t.batch.patches.size_bytes());
      std::memcpy(positions.data<float>() + r * 4, t.batch.positions.data<float>(), t.batch.positions.size_bytes());
      spans.push_back({t.batch.size(), t.pyramid.width(), t.pyramid.height()});
      r += t.batch.size();
    }
    const std::vector<Encoding> all = encode_batch(m, patches, positions, spans, {}, exec);
    ASSERT_EQ(all.size(), 3u);
    for (size_t i = 0; i < ts.size(); ++i) {
      const Encoding one = encode(m, ts[i].batch.patches, ts[i].batch.positions,
                                  {.image_width = ts[i].pyramid.width(), .image_height = ts[i].pyramid.height()}, exec);
      EXPECT_LT(max_rel_diff(all[i].embeddings, one.embeddings), 1e-5) << "image " << i;
      for (auto field : {&Encoding::class_token, &Encoding::pooled, &Encoding::logits, &Encoding::projected,
                         &Encoding::image_embeds}) {
        ASSERT_EQ((all[i].*field).rank(), (one.*field).rank());
        if ((one.*field).rank()) {
          EXPECT_LT(max_rel_diff(all[i].*field, one.*field), 1e-5) << "image " << i;
        }
      }
    }
  }
}

TEST(EncoderBatch, TokensThatDoNotAddUpAreOneError) {
  const VitModel m = VitModel::load(fixture("hf_vit"));
  Executor exec({.threads = 1});
  const Tokenization t = tokenize(test::random_image(64, 64, 3, 4), {}, params_for(m, Foveation::mixed, 20), exec);
  const ImageSpan spans[] = {{t.batch.size() - 1, 64, 64}};
  try {
    encode_batch(m, t.batch.patches, t.batch.positions, spans, {}, exec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add up"), std::string::npos) << e.what();
  }
  const ImageSpan zero[] = {{t.batch.size(), 0, 64}};
  EXPECT_THROW(encode_batch(m, t.batch.patches, t.batch.positions, zero, {}, exec), Error);
}

// Every window's tokens in t (encoded with keep_covered: every row) against an encode of that
// window's pixels as a standalone image: cosine >= 0.999 per token in fp32.
void check_standalone(const VitModel& m, const ImageU8& img, const Tokenization& t, Executor& exec) {
  const VitConfig& c = m.config();
  const Encoding e = encode_windows(m, t.batch, {}, exec);
  ASSERT_EQ(e.embeddings.dim(0), t.batch.size());  // keep_covered: every row
  const int64_t D = c.hidden;
  int64_t row = 0;
  for (size_t w = 0; w < t.batch.windows.size(); ++w) {
    const TokenWindow& win = t.batch.windows[w];
    // The window's pixels on their own: the resized whole image, or its box of the mip level.
    ImageU8 own;
    if (win.level < 0) {
      own = resize_area(img, win.grid_x * c.patch_px, win.grid_y * c.patch_px, exec);
    } else {
      const ImageU8 mip = to_image(t.pyramid.view(win.level));
      own = ImageU8(win.grid_x * c.patch_px, win.grid_y * c.patch_px, 3);
      for (int ch = 0; ch < 3; ++ch)
        for (int y = 0; y < own.height(); ++y)
          for (int x = 0; x < own.width(); ++x)
            own.at(ch, y, x) = mip.at(ch, (int(win.box[1]) >> win.level) + y, (int(win.box[0]) >> win.level) + x);
    }
    TokenizeParams p = params_for(m, Foveation::mixed, win.grid_x * win.grid_y);
    p.uniform = true;
    const Tokenization alone = tokenize(own.clone(), {}, p, exec);
    ASSERT_EQ(alone.batch.size(), win.tokens());
    const Encoding ref = encode(m, alone.batch.patches, alone.batch.positions,
                                {.image_width = own.width(), .image_height = own.height()}, exec);
    double worst = 1;
    for (int64_t i = 0; i < win.tokens(); ++i)
      worst = std::min(worst, row_cosine(e.embeddings.data<float>() + (row + i) * D, ref.embeddings.data<float>() + i * D, D));
    EXPECT_GE(worst, 0.999) << "window " << w << " (level " << win.level << ", " << win.grid_x << "x" << win.grid_y << ")";
    if (c.class_token) {
      ASSERT_EQ(e.window_class_tokens.dim(0), int64_t(t.batch.windows.size()));
      EXPECT_GE(row_cosine(e.window_class_tokens.data<float>() + int64_t(w) * D, ref.class_token.data<float>(), D), 0.999);
    }
    if (w == 0 && ref.pooled.rank()) {
      EXPECT_LT(max_rel_diff(e.pooled, ref.pooled), 1e-4);
    }
    if (c.projector != ProjectorType::none) {
      const int64_t E = ref.projected.dim(1);
      for (int64_t i = 0; i < win.tokens(); ++i)
        ASSERT_GE(row_cosine(e.projected.data<float>() + (row + i) * E, ref.projected.data<float>() + i * E, E), 0.999);
    }
    row += win.tokens();
  }
}

// The acceptance check: every window's tokens equal an encode of that window as a standalone
// native image (its pixels cut and tokenized on their own), cosine >= 0.999 per token in fp32.
TEST(EncoderWindows, EveryWindowIsAStandaloneNativeImage) {
  for (const std::string name : {"hf_vit", "clip", "siglip", "timm_reg", "hf_dinov2_reg", "gguf_llava"}) {
    SCOPED_TRACE(name);
    const VitModel m = VitModel::load(fixture(name));
    const VitConfig& c = m.config();
    const int S = c.native_px();
    const ImageU8 img = test::random_image(5 * S, 4 * S, 3, 5);
    Executor exec({.threads = 2});
    Query q;
    q.fixations.push_back({.x_px = 1.3f * S, .y_px = 2.9f * S});
    const int budget = 5 * c.grid * c.grid;
    const Tokenization t = tokenize(img.clone(), q, params_for(m, Foveation::windows, budget, true), exec);
    ASSERT_GE(t.batch.windows.size(), 3u);
    check_standalone(m, img, t, exec);
    // No query, and lines of detail on smooth shading: strips (level-0 windows narrower than
    // native) are standalone images too, of their own size.
    ImageU8 lines(5 * S, 4 * S, 3);
    const ImageU8 grain = test::random_image(5 * S, 4 * S, 3, 7);
    const int P = c.patch_px;
    for (int ch = 0; ch < 3; ++ch)
      for (int y = 0; y < 4 * S; ++y)
        for (int x = 0; x < 5 * S; ++x) {
          const bool ink = (y / P == 3 && x / P >= 2 && x / P < 2 + c.grid * 3 / 4) ||
                           (y / P == 2 * c.grid + 1 && x / P >= 3 * c.grid && x / P < 3 * c.grid + c.grid / 2 + 1);
          lines.at(ch, y, x) = ink ? grain.at(ch, y, x) : uint8_t(100 + x * 50 / (5 * S) + y * 30 / (4 * S));
        }
    const Tokenization s = tokenize(lines.clone(), {}, params_for(m, Foveation::windows, 2 * c.grid * c.grid, true), exec);
    EXPECT_TRUE(std::any_of(s.batch.windows.begin(), s.batch.windows.end(), [&](const TokenWindow& w) {
      return w.level == 0 && (w.grid_x < c.grid || w.grid_y < c.grid);
    })) << "no strip";
    check_standalone(m, lines, s, exec);
  }
}

TEST(EncoderWindows, CoveredTokensAreEncodedThenDropped) {
  const VitModel m = VitModel::load(fixture("hf_vit"));
  const int S = m.config().native_px(), G = m.config().grid;
  Executor exec({.threads = 2});
  const ImageU8 img = test::random_image(4 * S, 4 * S, 3, 6);
  Query q;
  q.fixations.push_back({.x_px = 1.5f * S, .y_px = 1.5f * S});
  const int budget = 3 * G * G;
  const Tokenization some = tokenize(img.clone(), q, params_for(m, Foveation::windows, budget), exec);
  // The same batch with nothing covered: every row of every window.
  TokenBatch all_rows;
  all_rows.patches = some.batch.patches.clone();
  all_rows.positions = some.batch.positions.clone();
  all_rows.levels = some.batch.levels.clone();
  all_rows.boxes = some.batch.boxes;
  all_rows.patch_px = some.batch.patch_px;
  all_rows.windows = some.batch.windows;
  all_rows.window = some.batch.window.clone();
  all_rows.covered = Tensor(DType::u8, {some.batch.size()});
  std::memset(all_rows.covered.bytes(), 0, size_t(some.batch.size()));
  const Encoding ea = encode_windows(m, all_rows, {}, exec);
  const Encoding es = encode_tokens(m, some.batch, {}, exec);
  ASSERT_EQ(ea.embeddings.dim(0), some.batch.size());
  ASSERT_LT(some.batch.kept(), some.batch.size());
  ASSERT_EQ(es.embeddings.dim(0), some.batch.kept());
  EXPECT_LE(es.embeddings.dim(0), budget);
  ASSERT_EQ(es.rows.size(), size_t(some.batch.kept()));
  const int64_t D = m.config().hidden;
  for (size_t i = 0; i < es.rows.size(); ++i) {
    const int64_t r = es.rows[i];
    ASSERT_EQ(some.batch.covered.data<uint8_t>()[r], 0);
    if (i) {
      ASSERT_GT(r, es.rows[i - 1]);
    }
    ASSERT_EQ(std::memcmp(es.embeddings.data<float>() + int64_t(i) * D, ea.embeddings.data<float>() + r * D, size_t(D) * 4), 0);
  }
  // class_token, pooled and logits are the base view's.
  EXPECT_EQ(std::memcmp(es.class_token.data<float>(), es.window_class_tokens.data<float>(), size_t(D) * 4), 0);

  // The embeddings file: the kept tokens' positions and windows, every window's box and class token.
  const EmbeddingsFile f = embeddings_file(some.batch, es, {{"format", kEmbeddingsFormat}});
  EXPECT_NO_THROW(validate_embeddings(f));
  ASSERT_EQ(f.positions.dim(0), es.embeddings.dim(0));
  ASSERT_TRUE(f.extra.count("window") && f.extra.count("window_boxes") && f.extra.count("window_class_tokens"));
  for (size_t i = 0; i < es.rows.size(); ++i) {
    EXPECT_EQ(f.extra.at("window").data<int32_t>()[i], some.batch.window.data<int32_t>()[es.rows[i]]);
    EXPECT_EQ(f.positions.data<float>()[i * 4], some.batch.positions.data<float>()[es.rows[i] * 4]);
  }
  EXPECT_EQ(f.extra.at("window_class_tokens").dim(0), int64_t(some.batch.windows.size()));
}

// Windowed and plain batches of different images in one call: each result is its batch's
// encode_tokens (rows, class tokens, projection); a lone batch gives encode_tokens' bytes.
TEST(EncoderWindows, TokensBatchEqualsEachBatchAlone) {
  for (const std::string name : {"hf_vit", "gguf_llava"}) {
    SCOPED_TRACE(name);
    const VitModel m = VitModel::load(fixture(name));
    const int S = m.config().native_px(), G = m.config().grid;
    Executor exec({.threads = 2});
    std::vector<Tokenization> ts;
    std::vector<TokenBatchImage> images;
    const Foveation kinds[] = {Foveation::windows, Foveation::mixed, Foveation::windows};
    for (int i = 0; i < 3; ++i) {
      const ImageU8 img = test::random_image((3 + i) * S, 3 * S + 8 * i, 3, 40 + i);
      Query q;
      q.fixations.push_back({.x_px = 1.2f * S, .y_px = 1.7f * S});
      ts.push_back(tokenize(img.clone(), q, params_for(m, kinds[i], (2 + i) * G * G), exec));
    }
    for (const Tokenization& t : ts) images.push_back({&t.batch, t.pyramid.width(), t.pyramid.height()});
    const std::vector<Encoding> all = encode_tokens_batch(m, images, {}, exec);
    ASSERT_EQ(all.size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      SCOPED_TRACE(i);
      const Encoding alone =
          encode_tokens(m, ts[i].batch, {.image_width = images[i].image_width, .image_height = images[i].image_height}, exec);
      EXPECT_EQ(all[i].rows, alone.rows);
      EXPECT_LT(max_rel_diff(all[i].embeddings, alone.embeddings), 1e-4);
      if (alone.projected.rank()) {
        EXPECT_LT(max_rel_diff(all[i].projected, alone.projected), 1e-4);
      }
      if (alone.window_class_tokens.rank()) {
        EXPECT_LT(max_rel_diff(all[i].window_class_tokens, alone.window_class_tokens), 1e-4);
      }
      // Alone in the call: encode_tokens' bytes.
      const std::vector<Encoding> one = encode_tokens_batch(m, std::span(&images[i], 1), {}, exec);
      ASSERT_EQ(one.size(), 1u);
      EXPECT_EQ(one[0].rows, alone.rows);
      ASSERT_EQ(one[0].embeddings.shape(), alone.embeddings.shape());
      EXPECT_EQ(std::memcmp(one[0].embeddings.data<float>(), alone.embeddings.data<float>(), alone.embeddings.size_bytes()), 0);
    }
  }
}

TEST(EncoderWindows, TokensBatchRefusesMixedPatches) {
  const VitModel m = VitModel::load(fixture("hf_vit"));
  Executor exec({.threads = 1});
  const ImageU8 img = test::random_image(64, 64, 3, 9);
  TokenizeParams p = params_for(m, Foveation::mixed, 16);
  const Tokenization a = tokenize(img.clone(), {}, p, exec);
  p.extract.dtype = DType::f16;
  const Tokenization b = tokenize(img.clone(), {}, p, exec);
  EXPECT_TRUE(encode_tokens_batch(m, std::span<const TokenBatchImage>(), {}, exec).empty());
  const TokenBatchImage mixed[] = {{&a.batch, 64, 64}, {&b.batch, 64, 64}};
  try {
    encode_tokens_batch(m, mixed, {}, exec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "encode_tokens_batch: every batch must hold patches of one dtype and one size");
  }
  const TokenBatchImage null[] = {{nullptr, 64, 64}};
  EXPECT_THROW(encode_tokens_batch(m, null, {}, exec), Error);
}

TEST(EncoderWindows, DefaultFoveationIsWindowsForCheckpointsAndMixedForRandomModels) {
  EXPECT_EQ(default_foveation(VitModel::load(fixture("hf_vit"))), Foveation::windows);
  EXPECT_EQ(default_foveation(VitModel::load(fixture("gguf_siglip"))), Foveation::windows);
  EXPECT_EQ(default_foveation(VitModel::load("random:vit-s16")), Foveation::mixed);
  const auto r = test::run_cli({"model", fixture("hf_vit"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"default_foveation\": \"windows\""), std::string::npos) << r.out;
  const auto t = test::run_cli({"model", fixture("hf_vit")});
  EXPECT_NE(t.out.find("foveation: windows by default"), std::string::npos) << t.out;
}

TEST(EncoderWindows, CliEncodeWritesTheKeptTokensAndTheWindows) {
  const std::string dir = test::temp_dir("encode_windows_cli");
  const std::string png = dir + "/in.png", out = dir + "/e.safetensors";
  save_png(test::random_image(160, 128, 3, 7), png);
  const std::string model = fixture("hf_vit");  // 32-px native, 4x4 grid of 8-px patches
  // The checkpoint's default: windows, budget 2·4² = 32.
  const auto r = test::run_cli({"encode", png, "--model", model, "--fixation", "40,40", "-o", out, "--json",
                                "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"foveation\": \"windows\""), std::string::npos) << r.out;
  const EmbeddingsFile f = load_embeddings(out);
  EXPECT_EQ(f.metadata.at("mode"), "windows");
  EXPECT_EQ(f.metadata.at("budget"), "32");
  EXPECT_LE(f.tokens(), 32);
  EXPECT_EQ(std::to_string(f.tokens()), f.metadata.at("tokens_kept"));
  ASSERT_TRUE(f.extra.count("window"));
  EXPECT_EQ(f.extra.at("window").dim(0), f.tokens());
  EXPECT_EQ(f.extra.at("window_boxes").dim(0), 2);
  EXPECT_EQ(f.extra.at("window_class_tokens").dim(0), 2);

  // --keep-covered hands on every encoded token; --foveation mixed the one sequence.
  const auto k = test::run_cli({"encode", png, "--model", model, "--fixation", "40,40", "-o", out, "--keep-covered",
                                "--threads", "1"});
  ASSERT_EQ(k.exit_code, 0) << k.err;
  EXPECT_EQ(load_embeddings(out).tokens(), 32);
  const auto mx = test::run_cli({"encode", png, "--model", model, "--fixation", "40,40", "-o", out, "--foveation",
                                 "mixed", "--threads", "1"});
  ASSERT_EQ(mx.exit_code, 0) << mx.err;
  EXPECT_EQ(load_embeddings(out).metadata.at("mode"), "foveated");
  EXPECT_EQ(load_embeddings(out).extra.count("window"), 0u);
  // A random model's default stays mixed.
  const auto rnd = test::run_cli({"encode", png, "--model", "random:vit-s16", "--patch", "8", "--budget", "40", "--json",
                                  "--threads", "1"});
  EXPECT_NE(rnd.exit_code, 0);  // random:vit-s16 has 16-px patches
  const auto rnd2 = test::run_cli({"encode", png, "--model", "random:vit-s16", "--budget", "40", "--json", "--threads", "1"});
  ASSERT_EQ(rnd2.exit_code, 0) << rnd2.err;
  EXPECT_NE(rnd2.out.find("\"foveation\": \"mixed\""), std::string::npos) << rnd2.out;

  // A batch: one file per image, each with its windows.
  const std::string in_dir = dir + "/imgs", out_dir = dir + "/out";
  std::filesystem::create_directories(in_dir);
  save_png(test::random_image(100, 80, 3, 8), in_dir + "/a.png");
  save_png(test::random_image(64, 96, 3, 9), in_dir + "/b.png");
  const auto b = test::run_cli({"encode", in_dir, "--model", model, "-o", out_dir, "--threads", "1"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  for (const char* stem : {"a", "b"}) {
    const EmbeddingsFile bf = load_embeddings(out_dir + "/" + stem + ".safetensors");
    EXPECT_EQ(bf.metadata.at("mode"), "windows") << stem;
    EXPECT_TRUE(bf.extra.count("window_boxes")) << stem;
    EXPECT_LE(bf.tokens(), 32) << stem;
  }
}

TEST(EncoderWindows, VideoWritesTheWindowsLayoutPerFrame) {
  const std::string dir = test::temp_dir("video_windows");
  const std::string clip = dir + "/c.y4m";
  test::write_y4m(clip, 64, 48, 3);
  const std::string out = dir + "/v.safetensors";
  const auto r = test::run_cli({"video", clip, "--model", fixture("hf_vit"), "--foveation", "windows", "--fixation",
                                "20,20", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile f = SafetensorsFile::open(out);
  for (const char* name : {"embeddings", "positions", "levels", "window", "frame_offsets", "window_offsets",
                           "window_boxes", "window_grids", "window_levels", "window_class_tokens"})
    EXPECT_NE(f.find(name), nullptr) << name;
  ASSERT_NE(f.find("window"), nullptr);
  EXPECT_EQ(f.find("window")->shape, f.find("levels")->shape);
  EXPECT_EQ(f.find("window_offsets")->shape, f.find("frame_offsets")->shape);
  EXPECT_EQ(f.metadata().at("foveation"), "windows");
  // Options that steer the mixed foveation's frame groups: one error line, no file.
  const std::string bad = dir + "/bad.safetensors";
  const auto e = test::run_cli({"video", clip, "--model", fixture("hf_vit"), "--foveation", "windows", "--group", "4",
                                "-o", bad});
  EXPECT_NE(e.exit_code, 0);
  EXPECT_EQ(e.err.rfind("fovea: error:", 0), 0u) << e.err;
  EXPECT_NE(e.err.find("--group"), std::string::npos) << e.err;
  EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
  EXPECT_FALSE(std::filesystem::exists(bad));
}

}  // namespace
}  // namespace fovea
