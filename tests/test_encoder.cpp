// The ViT encoder against PyTorch: fixtures written by scripts/make_encoder_fixtures.py
// (torchvision's VisionTransformer and HF-named CLIP / SigLIP modules, references in float64).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "encoder/avx2.hpp"
#include "encoder/avx512bf16.hpp"
#include "encoder/encoder_internal.hpp"
#include "encoder/kernels.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/grid.hpp"
#include "fovea/incremental_encoder.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/vulkan.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

namespace fs = std::filesystem;

// The model file of a fixture directory: model.safetensors, or mmproj.gguf for the gguf_* ones.
std::string fixture(const std::string& model, const std::string& file = "") {
  const std::string f = !file.empty() ? file : model.rfind("gguf_", 0) == 0 ? "mmproj.gguf" : "model.safetensors";
  return test::source_dir() + "/tests/data/encoder/" + model + "/" + f;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  if (a.numel() != b.numel()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return m;
}

struct Case {
  std::string name;
  Tensor patches, positions;
  int width = 0, height = 0;
};

std::vector<Case> load_cases(const SafetensorsFile& f) {
  std::vector<Case> out;
  std::stringstream names(f.metadata().at("cases"));
  for (std::string n; std::getline(names, n, ',');) {
    Case c;
    c.name = n;
    c.patches = f.load(*f.find(n + ".patches"));
    c.positions = f.load(*f.find(n + ".positions"));
    c.width = std::stoi(f.metadata().at(n + ".image_width"));
    c.height = std::stoi(f.metadata().at(n + ".image_height"));
    out.push_back(std::move(c));
  }
  return out;
}

// Compares every output the fixture holds for a case; returns the worst error.
double compare(const SafetensorsFile& f, const std::string& c, const Encoding& e) {
  double worst = 0;
  auto check = [&](const std::string& key, const Tensor& got) {
    const auto* entry = f.find(c + "." + key);
    if (!entry) return;
    ASSERT_TRUE(encoder_detail::present(got)) << c << "." << key << " missing from fovea's output";
    const Tensor want = f.load(*entry);
    ASSERT_EQ(want.numel(), got.numel()) << c << "." << key;
    const double err = max_abs_diff(want, got);
    EXPECT_LE(err, 1e-4) << c << "." << key;
    worst = std::max(worst, err);
  };
  check("last_hidden", e.embeddings);
  check("class_token", e.class_token);
  check("pooled", e.pooled);
  check("image_embeds", e.image_embeds);
  check("logits", e.logits);
  check("projected", e.projected);
  return worst;
}

class EncoderFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(EncoderFixture, Fp32MatchesPyTorchWithin1e4) {
  const VitModel model = VitModel::load(fixture(GetParam()));
  const SafetensorsFile f = SafetensorsFile::open(fixture(GetParam(), "cases.safetensors"));
  for (Kernels k : {Kernels::best, Kernels::reference}) {
    Executor exec({.threads = 2, .kernels = k});
    for (const Case& c : load_cases(f)) {
      const Encoding e = encode(model, c.patches, c.positions, {.image_width = c.width, .image_height = c.height}, exec);
      const double err = compare(f, c.name, e);
      RecordProperty(c.name + (k == Kernels::best ? ".fast" : ".reference") + ".max_abs_error", std::to_string(err));
    }
  }
}

TEST_P(EncoderFixture, Bf16CosineToFp32AtLeast0999) {
  const VitModel model = VitModel::load(fixture(GetParam()));
  const SafetensorsFile f = SafetensorsFile::open(fixture(GetParam(), "cases.safetensors"));
  Executor exec({.threads = 2});
  for (const Case& c : load_cases(f)) {
    EncodeParams p{.image_width = c.width, .image_height = c.height};
    const Encoding a = encode(model, c.patches, c.positions, p, exec);
    p.precision = Precision::bf16;
    const Encoding b = encode(model, c.patches, c.positions, p, exec);
    const double cos = mean_row_cosine(a.embeddings, b.embeddings);
    EXPECT_GE(cos, 0.999) << c.name;
    RecordProperty(c.name + ".bf16_mean_row_cosine", std::to_string(cos));
    if (encoder_detail::present(a.pooled)) {
      EXPECT_GE(cosine_similarity(a.pooled, b.pooled), 0.999) << c.name;
    }
    if (encoder_detail::present(a.projected)) {
      EXPECT_GE(mean_row_cosine(a.projected, b.projected), 0.999) << c.name;
    }
  }
}

// From raw pixels: the fixture's native-size image.png through fovea's uniform tokenizer with
// the model's own input contract (preprocessor_config.json, ImageNet's defaults for torchvision,
// the GGUF keys) against the reference's forward of the same pixels with the family's own
// preprocessing (HF's rescale + normalize, torchvision's transforms, LLaVA's get_image_features).
TEST_P(EncoderFixture, FromRawPixelsWithTheModelsOwnPreprocessing) {
  const VitModel model = VitModel::load(fixture(GetParam()));
  const SafetensorsFile f = SafetensorsFile::open(fixture(GetParam(), "cases.safetensors"));
  ASSERT_TRUE(f.metadata().count("raw.image"));
  ImageU8 image = load_image(fixture(GetParam(), f.metadata().at("raw.image")));
  const VitConfig& c = model.config();
  ASSERT_EQ(image.width(), c.native_px());
  TokenizeParams tp;
  tp.uniform = true;
  tp.patch_px = c.patch_px;
  tp.extract.norm = normalization(c.input);
  Executor exec({.threads = 2});
  const Tokenization t = tokenize(std::move(image), {}, tp, exec);
  ASSERT_EQ(t.batch.size(), int64_t(c.grid) * c.grid);  // native size: no resize
  const Encoding e = encode(model, t.batch.patches, t.batch.positions,
                            {.image_width = c.native_px(), .image_height = c.native_px()}, exec);
  const double err = compare(f, "raw", e);
  RecordProperty("raw.max_abs_error", std::to_string(err));
  if (c.projector != ProjectorType::none) {
    EXPECT_EQ(e.projected.dim(1), c.projector_dim);
  }
}

// The same through the command line, as a user runs it: `fovea encode IMAGE --uniform --model M`.
TEST_P(EncoderFixture, CliEncodeUniformMatchesTheReference) {
  const std::string dir = test::temp_dir("enc_raw_cli_" + GetParam());
  const SafetensorsFile ref = SafetensorsFile::open(fixture(GetParam(), "cases.safetensors"));
  const auto r = test::run_cli({"encode", fixture(GetParam(), "image.png"), "--uniform", "--model", fixture(GetParam()),
                                "-o", dir + "/e.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile out = SafetensorsFile::open(dir + "/e.safetensors");
  for (const char* name : {"last_hidden", "projected"}) {
    const auto* want = ref.find(std::string("raw.") + name);
    if (!want) continue;
    const auto* got = out.find(std::string(name) == "last_hidden" ? "embeddings" : name);
    ASSERT_NE(got, nullptr) << name;
    const double err = max_abs_diff(ref.load(*want), out.load(*got));
    EXPECT_LE(err, 1e-4) << name;
    RecordProperty(std::string("cli.") + name + ".max_abs_error", std::to_string(err));
  }
  const std::string source = out.metadata().at("preprocessing_source");
  EXPECT_EQ(source.rfind("model: ", 0), 0u) << source;
  const VitConfig mc = VitModel::load(fixture(GetParam())).config();
  EXPECT_EQ(out.metadata().at("model_naming"), mc.naming);
  EXPECT_FALSE(out.metadata().at("embeddings_output").empty());
  // A projector that is not run is said once on stderr, and only then.
  EXPECT_EQ(r.err.find("projector is not applied") != std::string::npos, !mc.ignored_projector.empty()) << r.err;
}

// pooled_output() names what `pooled` is, and every embeddings file carries it: one said to be
// the class token is byte for byte class_token, one said to be anything else is not, and a model
// without a pooled output says nothing.
TEST_P(EncoderFixture, PooledOutputSaysWhatPooledIs) {
  const VitModel model = VitModel::load(fixture(GetParam()));
  const SafetensorsFile f = SafetensorsFile::open(fixture(GetParam(), "cases.safetensors"));
  const std::vector<Case> cases = load_cases(f);
  const Case& c = cases.front();
  Executor exec({.threads = 2});
  const Encoding e = encode(model, c.patches, c.positions, {.image_width = c.width, .image_height = c.height}, exec);
  const std::string said = pooled_output(model);
  EXPECT_EQ(said.empty(), !encoder_detail::present(e.pooled)) << "'" << said << "'";
  const auto meta = encoder_metadata(model, Precision::fp32);
  ASSERT_EQ(meta.count("pooled_output"), said.empty() ? 0u : 1u);
  if (said.empty()) return;
  EXPECT_EQ(meta.at("pooled_output"), said);
  const bool identical = encoder_detail::present(e.class_token) &&
                         e.pooled.size_bytes() == e.class_token.size_bytes() &&
                         std::memcmp(e.pooled.bytes(), e.class_token.bytes(), e.pooled.size_bytes()) == 0;
  EXPECT_EQ(said.rfind("class_token (identical", 0) == 0, identical) << said;
}

INSTANTIATE_TEST_SUITE_P(Models, EncoderFixture,
                         ::testing::Values("clip", "clip_full", "siglip", "torchvision", "gguf_llava", "gguf_siglip",
                                           "hf_llava", "hf_vit", "hf_dinov2", "timm_vit", "timm_clip",
                                           "hf_dinov2_reg", "timm_reg", "siglip2", "timm_siglip",
                                           "hf_dinov2_swiglu", "timm_dinov2_swiglu", "open_clip", "intern_vit",
                                           "idefics3", "blip2", "blip", "paligemma"));

// HF LLaVA: config.json's vision_feature_layer / select strategy decide what the projector reads.
TEST(EncoderContract, HfLlavaReadsTheConfiguredLayer) {
  const VitConfig c = VitModel::load(fixture("hf_llava")).config();
  EXPECT_EQ(c.naming, "hf_llava");
  EXPECT_EQ(c.layers, 2);  // hidden_states[-2] of 3 blocks
  EXPECT_EQ(c.layers_in_checkpoint, 3);
  EXPECT_EQ(c.final_norm, FinalNorm::none);
  EXPECT_EQ(c.projector, ProjectorType::mlp);
  EXPECT_EQ(c.projector_dim, 40);
  EXPECT_EQ(c.input.source, "preprocessor_config.json");
  const std::string dir = test::temp_dir("enc_llava_cfg");
  fs::copy_file(fixture("hf_llava"), dir + "/model.safetensors");
  nlohmann::json cfg;
  std::ifstream(fixture("hf_llava", "config.json")) >> cfg;
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json c2 = cfg;
    c2[key] = std::move(v);
    std::ofstream(dir + "/config.json") << c2.dump();
  };
  with("vision_feature_layer", -1);
  EXPECT_EQ(VitModel::load(dir + "/model.safetensors").config().layers, 3);
  with("vision_feature_layer", 1);
  EXPECT_EQ(VitModel::load(dir + "/model.safetensors").config().layers, 1);
  with("vision_feature_layer", nlohmann::json::array({-2, -1}));
  EXPECT_THROW(VitModel::load(dir + "/model.safetensors"), Error);
  with("vision_feature_layer", -5);
  EXPECT_THROW(VitModel::load(dir + "/model.safetensors"), Error);
  with("vision_feature_select_strategy", "full");
  try {
    VitModel::load(dir + "/model.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::unsupported);
    EXPECT_NE(std::string(e.what()).find("'full'"), std::string::npos) << e.what();
  }
}

TEST(EncoderContract, WhereThePreprocessingComesFrom) {
  const VitConfig clip = VitModel::load(fixture("clip")).config();
  EXPECT_EQ(clip.input.source, "preprocessor_config.json");
  EXPECT_NE(embedding_output(clip).find("before post_layernorm"), std::string::npos);
  const VitConfig full = VitModel::load(fixture("clip_full")).config();
  EXPECT_FLOAT_EQ(full.input.mean[1], 0.4f);  // the file's, not CLIP's defaults
  EXPECT_FLOAT_EQ(full.input.std[2], 0.3f);
  const VitConfig sig = VitModel::load(fixture("siglip")).config();
  EXPECT_FLOAT_EQ(sig.input.mean[0], 0.5f);
  EXPECT_NE(embedding_output(sig).find("after post_layernorm"), std::string::npos);
  const VitConfig tv = VitModel::load(fixture("torchvision")).config();
  EXPECT_NE(tv.input.source.find("ImageNet"), std::string::npos);
  EXPECT_FLOAT_EQ(tv.input.mean[0], 0.485f);
  EXPECT_FLOAT_EQ(tv.input.std[2], 0.225f);
  EXPECT_EQ(tv.naming, "torchvision");
  // Without preprocessor_config.json: the family's published defaults, labelled as such.
  const std::string dir = test::temp_dir("enc_contract");
  fs::copy_file(fixture("siglip"), dir + "/model.safetensors");
  const VitConfig bare = VitModel::load(dir + "/model.safetensors").config();
  EXPECT_NE(bare.input.source.find("SigLIP defaults"), std::string::npos);
  EXPECT_FLOAT_EQ(bare.input.std[1], 0.5f);
  // A broken preprocessor_config.json is an error, not a silent default.
  std::ofstream(dir + "/preprocessor_config.json") << R"({"image_mean": [0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})";
  EXPECT_THROW(VitModel::load(dir + "/model.safetensors"), Error);
  // rescale_factor and do_normalize fold into the tokenizer's (x/255 − mean')/std'.
  std::ofstream(dir + "/preprocessor_config.json")
      << R"({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.25, 0.5, 1.0], "rescale_factor": 0.00784313725490196})";
  const Normalization n = normalization(VitModel::load(dir + "/model.safetensors").config().input);
  for (int ch = 0; ch < 3; ++ch) {
    const float want = (200.0f / 127.5f - 0.5f) / (ch == 0 ? 0.25f : ch == 1 ? 0.5f : 1.0f);
    EXPECT_NEAR((200.0f / 255.0f - n.mean[ch]) / n.std[ch], want, 1e-5) << ch;
  }
  std::ofstream(dir + "/preprocessor_config.json") << R"({"do_normalize": false, "do_rescale": true})";
  const Normalization raw = normalization(VitModel::load(dir + "/model.safetensors").config().input);
  EXPECT_NEAR((200.0f / 255.0f - raw.mean[0]) / raw.std[0], 200.0f / 255.0f, 1e-6);
}

// --mean / --std still override the model, and the file says which was applied.
TEST(EncodeCli, MeanAndStdOverrideTheModelsPreprocessing) {
  const std::string dir = test::temp_dir("enc_override");
  const SafetensorsFile ref = SafetensorsFile::open(fixture("siglip", "cases.safetensors"));
  const auto r = test::run_cli({"encode", fixture("siglip", "image.png"), "--uniform", "--model", fixture("siglip"),
                                "--mean", "0,0,0", "--std", "1,1,1", "-o", dir + "/e.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile out = SafetensorsFile::open(dir + "/e.safetensors");
  EXPECT_EQ(out.metadata().at("preprocessing_source"), "--mean/--std");
  EXPECT_EQ(out.metadata().at("norm_mean"), "0,0,0");
  EXPECT_GT(max_abs_diff(ref.load(*ref.find("raw.last_hidden")), out.load(*out.find("embeddings"))), 0.1);
  const auto half = test::run_cli({"encode", fixture("siglip", "image.png"), "--uniform", "--model", fixture("siglip"),
                                   "--std", "1,1,1", "-o", dir + "/h.safetensors", "--json"});
  ASSERT_EQ(half.exit_code, 0) << half.err;
  const nlohmann::json j = nlohmann::json::parse(half.out);
  EXPECT_NE(j["encoder"]["preprocessing"]["source"].get<std::string>().find("mean from the model"), std::string::npos);
  EXPECT_NEAR(j["encoder"]["preprocessing"]["mean"][0].get<double>(), 0.5, 1e-6);
}

TEST(Encoder, DetectsFamiliesAndConfig) {
  const VitModel clip = VitModel::load(fixture("clip"));
  EXPECT_EQ(clip.config().family, VitFamily::clip);
  EXPECT_EQ(clip.config().act, Activation::quick_gelu);
  EXPECT_TRUE(clip.config().pre_norm);
  EXPECT_EQ(clip.config().heads, 4);
  EXPECT_FALSE(clip.is_random());
  const VitModel full = VitModel::load(fixture("clip_full"));
  EXPECT_EQ(full.config().projection_dim, 24);
  EXPECT_GT(full.tensors_ignored(), 0);  // the text tower
  const VitModel sig = VitModel::load(fixture("siglip"));
  EXPECT_EQ(sig.config().family, VitFamily::siglip);
  EXPECT_FALSE(sig.config().class_token);
  EXPECT_TRUE(sig.config().attention_pool);
  EXPECT_EQ(sig.config().act, Activation::gelu_tanh);
  EXPECT_FLOAT_EQ(sig.config().ln_eps, 1e-6f);
  const VitModel tv = VitModel::load(fixture("torchvision"));
  EXPECT_EQ(tv.config().family, VitFamily::torchvision);
  EXPECT_EQ(tv.config().num_classes, 10);
  EXPECT_EQ(tv.config().grid, 4);
  EXPECT_EQ(tv.config().patch_px, 8);
}

TEST(Encoder, RandomModelsAreLabelled) {
  const VitModel m = VitModel::load("random:vit-tiny:7");
  EXPECT_TRUE(m.is_random());
  EXPECT_NE(m.describe().find("RANDOM WEIGHTS"), std::string::npos);
  EXPECT_THROW(VitModel::load("random:vit-huge"), Error);
  EXPECT_THROW(VitModel::load("random:vit-b16:x1"), Error);
  // ViT-Ti/16's shape, the random twin of a real ViT-Ti checkpoint in benchmarks.
  const VitModel ti = VitModel::load("random:vit-ti16");
  EXPECT_EQ(ti.config().hidden, 192);
  EXPECT_EQ(ti.config().heads, 3);
  EXPECT_EQ(ti.config().mlp, 768);
  EXPECT_EQ(ti.config().layers, 12);
  EXPECT_EQ(ti.config().patch_px, 16);
}

// Random tokens for a model; positions spread over a w × h image.
void random_tokens(const VitConfig& c, int64_t n, int w, int h, Tensor* patches, Tensor* positions) {
  *patches = Tensor(DType::f32, {n, c.channels, c.patch_px, c.patch_px});
  *positions = Tensor(DType::f32, {n, 4});
  uint32_t s = 12345;
  auto next = [&] {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    return float(s % 100000) / 100000.0f;
  };
  for (int64_t i = 0; i < patches->numel(); ++i) patches->data<float>()[i] = next() * 4 - 2;
  for (int64_t i = 0; i < n; ++i) {
    float* p = positions->data<float>() + i * 4;
    p[0] = next() * w, p[1] = next() * h, p[2] = float(c.patch_px), p[3] = 0;
  }
}

// More tokens than one key block (512) and query block (128): the online softmax across blocks
// must give the plain softmax attention of the reference path.
TEST(Encoder, TiledAttentionMatchesReferenceAcrossBlocks) {
  const VitModel m = VitModel::load("random:vit-tiny:3");
  Tensor patches, positions;
  random_tokens(m.config(), 700, 640, 480, &patches, &positions);
  Executor fast({.threads = 2});
  Executor ref({.threads = 1, .kernels = Kernels::reference});
  const EncodeParams p{.image_width = 640, .image_height = 480};
  const Encoding a = encode(m, patches, positions, p, fast);
  const Encoding b = encode(m, patches, positions, p, ref);
  EXPECT_LE(max_abs_diff(a.embeddings, b.embeddings), 1e-4);
  Executor one({.threads = 1});
  const Encoding c = encode(m, patches, positions, p, one);
  EXPECT_LE(max_abs_diff(a.embeddings, c.embeddings), 1e-5);  // thread count does not matter
}

TEST(Encoder, RowKernelsMatchReferences) {
  using namespace encoder_detail;
  std::vector<float> x(77), w(77), b(77), o1(77), o2(77);
  for (int i = 0; i < 77; ++i) x[i] = std::sin(i * 0.7f) * 3, w[i] = 1 + 0.01f * i, b[i] = 0.1f * (i % 5);
  layer_norm_row(x.data(), w.data(), b.data(), 1e-5f, 77, o1.data(), DType::f32);
  layer_norm_row_ref(x.data(), w.data(), b.data(), 1e-5f, 77, o2.data(), DType::f32);
  for (int i = 0; i < 77; ++i) EXPECT_NEAR(o1[i], o2[i], 1e-5);
  float m1 = -INFINITY, l1 = 0, m2 = -INFINITY, l2 = 0;
  for (int step = 0; step < 2; ++step) {
    const float c1 = softmax_step_row(x.data(), 77, 0.3f + step, &m1, &l1, o1.data(), DType::f32);
    const float c2 = softmax_step_row_ref(x.data(), 77, 0.3f + step, &m2, &l2, o2.data(), DType::f32);
    EXPECT_NEAR(c1, c2, 1e-6);
    EXPECT_NEAR(l1, l2, 1e-4 * l2);
    for (int i = 0; i < 77; ++i) EXPECT_NEAR(o1[i], o2[i], 1e-6);
  }
  // The hierarchical ranking's column-wise pieces: exp(x − m) with the sum, and max of x·y.
  std::vector<float> e1(x), e2(x), sh(77), s1(77, 0.5f), s2(77, 0.5f);
  for (int i = 0; i < 77; ++i) sh[i] = 3.0f - 0.05f * i;
  exp_shift_sum_row(e1.data(), sh.data(), s1.data(), 77);
  exp_shift_sum_row_ref(e2.data(), sh.data(), s2.data(), 77);
  for (int i = 0; i < 77; ++i) {
    EXPECT_NEAR(e1[i], std::exp(x[i] - sh[i]), 1e-6 * e2[i]);
    EXPECT_NEAR(e1[i], e2[i], 1e-6 * e2[i]);
    EXPECT_NEAR(s1[i], s2[i], 1e-6 * s2[i]);
    EXPECT_GT(s1[i], 0.5f);
  }
  for (const int n : {0, 1, 5, 16, 77}) {
    float want = -INFINITY;
    for (int i = 0; i < n; ++i) want = std::max(want, x[i] * w[i]);
    EXPECT_EQ(max_product_row(x.data(), w.data(), n), want) << n;
    EXPECT_EQ(max_product_row_ref(x.data(), w.data(), n), want) << n;
  }
  std::vector<uint16_t> h1(77);
  to_bf16_row(x.data(), h1.data(), 77);
  for (int i = 0; i < 77; ++i) EXPECT_EQ(h1[i], f32_to_bf16(x[i]));
  from_bf16_row(h1.data(), o1.data(), 77);
  for (int i = 0; i < 77; ++i) EXPECT_EQ(o1[i], bf16_to_f32(h1[i]));
}

TEST(Encoder, RejectsMismatchedInputs) {
  const VitModel m = VitModel::load(fixture("clip"));
  Executor exec({.threads = 1});
  Tensor patches(DType::f32, {4, 3, 16, 16}), positions(DType::f32, {4, 4});
  try {
    encode(m, patches, positions, {.image_width = 32, .image_height = 32}, exec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("--patch 8"), std::string::npos) << e.what();
  }
  Tensor p8(DType::f32, {4, 3, 8, 8}), bad_pos(DType::f32, {3, 4});
  EXPECT_THROW(encode(m, p8, bad_pos, {.image_width = 32, .image_height = 32}, exec), Error);
  EXPECT_THROW(encode(m, p8, positions, {.image_width = 0, .image_height = 32}, exec), Error);
  positions.data<float>()[0] = NAN;
  EXPECT_THROW(encode(m, p8, positions, {.image_width = 32, .image_height = 32}, exec), Error);
}

// ---- hostile and incomplete checkpoints ----------------------------------------------------------

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// Loads `path` expecting an Error with `code` whose message contains every fragment.
void expect_load_error(const std::string& path, Errc code, std::vector<std::string> fragments) {
  try {
    VitModel::load(path);
    FAIL() << "loaded " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << f << " not in: " << e.what();
  }
}

// A fixture's weights copied alone into `dir` (no config.json beside them): the path, and the
// fixture's config.json to edit and write back with write_config.
std::string copied_weights(const std::string& dir, const std::string& model, nlohmann::json* cfg) {
  fs::copy_file(fixture(model), dir + "/model.safetensors");
  std::ifstream(fixture(model, "config.json")) >> *cfg;
  return dir + "/model.safetensors";
}
void write_config(const std::string& weights, const nlohmann::json& cfg) {
  std::ofstream(fs::path(weights).parent_path() / "config.json") << cfg.dump();
}

// Re-serialises the fixture's tensors with edits: `drop` removed, `reshape` given a new shape,
// `retype` stored as I32.
std::string edited_checkpoint(const std::string& dir, const std::string& model, const std::set<std::string>& drop,
                              const std::map<std::string, std::vector<int64_t>>& reshape,
                              const std::set<std::string>& retype) {
  const SafetensorsFile f = SafetensorsFile::open(fixture(model));
  std::vector<Tensor> keep;
  std::vector<std::string> names;
  keep.reserve(f.entries().size());
  for (const auto& e : f.entries()) {
    if (drop.count(e.name)) continue;
    Tensor t = f.load(e);
    if (auto it = reshape.find(e.name); it != reshape.end()) t = Tensor(t.dtype(), it->second);
    if (retype.count(e.name)) t = Tensor(DType::i32, t.shape());
    keep.push_back(std::move(t));
    names.push_back(e.name);
  }
  std::vector<NamedTensor> ts;
  for (size_t i = 0; i < keep.size(); ++i) ts.push_back({names[i], &keep[i]});
  fs::create_directories(dir);
  fs::copy_file(fixture(model, "config.json"), dir + "/config.json", fs::copy_options::overwrite_existing);
  const std::string path = dir + "/model.safetensors";
  save_safetensors(path, ts);
  return path;
}

TEST(EncoderCheckpoint, NamesEveryMissingOrMisShapedTensor) {
  const std::string dir = test::temp_dir("enc_missing");
  const std::string path = edited_checkpoint(
      dir + "/a", "clip",
      {"vision_model.encoder.layers.1.mlp.fc2.bias", "vision_model.pre_layrnorm.weight"},
      {{"vision_model.encoder.layers.0.self_attn.k_proj.weight", {32, 31}}},
      {"vision_model.post_layernorm.bias"});
  expect_load_error(path, Errc::corrupt_data,
                    {"missing 2 tensor(s)", "vision_model.encoder.layers.1.mlp.fc2.bias [32]",
                     "vision_model.pre_layrnorm.weight [32]",
                     "vision_model.encoder.layers.0.self_attn.k_proj.weight has shape [32, 31], expected [32, 32]",
                     "vision_model.post_layernorm.bias has dtype I32"});
  // A torchvision file without its pooling norm and with a short MLP bias.
  const std::string tv = edited_checkpoint(dir + "/b", "torchvision", {"encoder.ln.weight"},
                                           {{"encoder.layers.encoder_layer_1.mlp.3.bias", {31}}}, {});
  expect_load_error(tv, Errc::corrupt_data, {"encoder.ln.weight [32]", "encoder.layers.encoder_layer_1.mlp.3.bias has shape [31]"});
}

TEST(EncoderCheckpoint, HostileFilesGiveClearErrors) {
  const std::string dir = test::temp_dir("enc_hostile");
  const std::vector<uint8_t> good = read_bytes(fixture("siglip"));
  ASSERT_GT(good.size(), 1000u);
  auto write = [&](const std::string& name, const std::vector<uint8_t>& b) {
    const std::string p = dir + "/" + name;
    write_bytes(p, b);
    return p;
  };
  // Truncated: the offsets run past the end of the buffer.
  expect_load_error(write("trunc.safetensors", std::vector<uint8_t>(good.begin(), good.end() - 100)), Errc::corrupt_data,
                    {"trunc.safetensors"});
  expect_load_error(write("tiny.safetensors", std::vector<uint8_t>(good.begin(), good.begin() + 5)), Errc::corrupt_data,
                    {"tiny.safetensors"});
  // Header length beyond the 100 MB limit.
  std::vector<uint8_t> huge = good;
  huge[4] = 0x40;
  expect_load_error(write("huge.safetensors", huge), Errc::limit_exceeded, {"huge.safetensors"});
  // Broken JSON.
  std::vector<uint8_t> json = good;
  json[8] = 'x';
  expect_load_error(write("json.safetensors", json), Errc::corrupt_data, {"JSON"});
  // A bad dtype name, and overlapping offsets, written by hand.
  auto raw = [](const std::string& header, size_t data) {
    std::vector<uint8_t> out(8 + header.size() + data, 0);
    for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
    std::memcpy(out.data() + 8, header.data(), header.size());
    return out;
  };
  expect_load_error(write("dtype.safetensors", raw(R"({"conv_proj.weight": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}})", 4)),
                    Errc::corrupt_data, {"unknown dtype"});
  expect_load_error(write("overlap.safetensors", raw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12)),
                    Errc::corrupt_data, {"overlaps"});
  expect_load_error(write("oob.safetensors", raw(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8)),
                    Errc::corrupt_data, {"oob.safetensors"});
  // Valid safetensors, but no ViT inside.
  Tensor t(DType::f32, {3});
  save_safetensors(dir + "/other.safetensors", {{"linear.weight", &t}});
  expect_load_error(dir + "/other.safetensors", Errc::unsupported,
                    {"no ViT naming recognised", "layernorm_before", "norm1", "patch_embed.proj.weight"});
  expect_load_error(dir + "/absent.safetensors", Errc::io, {"absent.safetensors"});
}

// HF's sharded layout (model.safetensors.index.json + shards), given as the index or the
// directory, loads the same model as the single file.
TEST(EncoderCheckpoint, ShardedHfCheckpointsLoadLikeOneFile) {
  const std::string dir = test::temp_dir("enc_sharded");
  const SafetensorsFile f = SafetensorsFile::open(fixture("hf_llava"));
  std::vector<Tensor> ts;
  ts.reserve(f.entries().size());
  std::vector<NamedTensor> a, b;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < f.entries().size(); ++i) {
    const auto& e = f.entries()[i];
    ts.push_back(f.load(e));
    const bool first = i % 2 == 0;  // interleaved, so the tower and the projector span both shards
    (first ? a : b).push_back({e.name, &ts.back()});
    index["weight_map"][e.name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  save_safetensors(dir + "/model-00001-of-00002.safetensors", a);
  save_safetensors(dir + "/model-00002-of-00002.safetensors", b);
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  for (const char* file : {"config.json", "preprocessor_config.json"})
    fs::copy_file(fixture("hf_llava", file), dir + "/" + file);
  const VitModel one = VitModel::load(fixture("hf_llava"));
  const SafetensorsFile cases = SafetensorsFile::open(fixture("hf_llava", "cases.safetensors"));
  std::vector<Case> all = load_cases(cases);
  const Case& c = all[0];
  Executor exec({.threads = 1});
  const Encoding want = encode(one, c.patches, c.positions, {.image_width = c.width, .image_height = c.height}, exec);
  for (const std::string& spec : {dir + "/model.safetensors.index.json", dir}) {
    const VitModel m = VitModel::load(spec);
    EXPECT_EQ(m.config().naming, "hf_llava");
    EXPECT_EQ(m.tensors_used(), one.tensors_used());
    const Encoding got = encode(m, c.patches, c.positions, {.image_width = c.width, .image_height = c.height}, exec);
    EXPECT_EQ(max_abs_diff(want.projected, got.projected), 0.0) << spec;
  }
  // A shard that is missing, a tensor the shard does not hold, a path outside the directory.
  nlohmann::json bad = index;
  bad["weight_map"][f.entries()[0].name] = "model-00003-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << bad.dump();
  expect_load_error(dir, Errc::io, {"model-00003-of-00002.safetensors"});
  bad = index;
  bad["weight_map"][f.entries()[0].name] = "model-00002-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << bad.dump();
  expect_load_error(dir, Errc::corrupt_data, {"does not hold it"});
  bad["weight_map"][f.entries()[0].name] = "../model-00001-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << bad.dump();
  expect_load_error(dir, Errc::corrupt_data, {"not a plain file name"});
}

TEST(EncoderCheckpoint, ConfigJsonMustAgreeWithTensors) {
  const std::string dir = test::temp_dir("enc_config");
  fs::copy_file(fixture("clip"), dir + "/model.safetensors");
  nlohmann::json cfg;
  std::ifstream(fixture("clip", "config.json")) >> cfg;
  cfg["hidden_size"] = 48;
  std::ofstream(dir + "/config.json") << cfg.dump();
  expect_load_error(dir + "/model.safetensors", Errc::corrupt_data, {"hidden_size = 48", "32"});
  std::ofstream(dir + "/config.json") << "{not json";
  expect_load_error(dir + "/model.safetensors", Errc::corrupt_data, {"config.json"});
  cfg["hidden_size"] = 32;
  cfg["hidden_act"] = "swish";
  std::ofstream(dir + "/config.json") << cfg.dump();
  expect_load_error(dir + "/model.safetensors", Errc::unsupported, {"swish"});
}

// ---- HF ViT, HF DINOv2, timm ViT ------------------------------------------------------------------

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

void expect_one_line_error(const test::RunResult& r, int code, const std::string& fragment) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("fovea: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << r.err;
}


TEST(EncoderLoaders, DetectsHfVitDinov2AndTimm) {
  const VitModel vit = VitModel::load(fixture("hf_vit"));
  const VitConfig& v = vit.config();
  EXPECT_EQ(v.naming, "hf_vit");
  EXPECT_EQ(v.family, VitFamily::vit);
  EXPECT_EQ(v.act, Activation::gelu_erf);
  EXPECT_FLOAT_EQ(v.ln_eps, 1e-12f);
  EXPECT_EQ(v.heads, 4);
  EXPECT_EQ(v.grid, 4);
  EXPECT_EQ(v.patch_px, 8);
  EXPECT_EQ(v.layers, 2);
  EXPECT_EQ(v.mlp, 64);
  EXPECT_TRUE(v.class_token);
  EXPECT_EQ(v.final_norm, FinalNorm::all_tokens);
  EXPECT_EQ(v.num_classes, 0);
  EXPECT_EQ(vit.tensors_ignored(), 0);  // the pooler is read
  EXPECT_NE(vit.describe().find("[hf_vit]"), std::string::npos) << vit.describe();
  EXPECT_EQ(embedding_output(v), "last_hidden_state (after the final layernorm)");
  const VitModel dino = VitModel::load(fixture("hf_dinov2"));
  const VitConfig& d = dino.config();
  EXPECT_EQ(d.naming, "hf_dinov2");
  EXPECT_EQ(d.family, VitFamily::dinov2);
  EXPECT_EQ(to_string(d.family), "dinov2");
  EXPECT_FLOAT_EQ(d.ln_eps, 1e-6f);
  EXPECT_EQ(d.act, Activation::gelu_erf);
  EXPECT_EQ(d.heads, 4);
  EXPECT_EQ(dino.tensors_ignored(), 0);  // mask_token counted as read (unused by the forward pass)
  const VitModel timm = VitModel::load(fixture("timm_vit"));
  const VitConfig& t = timm.config();
  EXPECT_EQ(t.naming, "timm_vit");
  EXPECT_EQ(t.family, VitFamily::vit);
  EXPECT_EQ(t.heads, 4);  // config.json model_args.num_heads
  EXPECT_EQ(t.num_classes, 10);
  EXPECT_FLOAT_EQ(t.ln_eps, 1e-6f);
  EXPECT_EQ(timm.tensors_ignored(), 0);
  EXPECT_EQ(embedding_output(t), "forward_features (after the final norm)");
  // timm's CLIP tower: norm_pre, no patch bias, eps 1e-5, and the activation config.json names.
  const VitModel clip = VitModel::load(fixture("timm_clip"));
  const VitConfig& tc = clip.config();
  EXPECT_EQ(tc.naming, "timm_vit");
  EXPECT_TRUE(tc.pre_norm);
  EXPECT_FALSE(tc.patch_bias);
  EXPECT_FLOAT_EQ(tc.ln_eps, 1e-5f);
  EXPECT_EQ(tc.act, Activation::quick_gelu);  // architecture "..._clip_quickgelu_..."
  EXPECT_EQ(tc.num_classes, 12);              // CLIP's image projection, as timm names it `head`
  EXPECT_EQ(clip.tensors_ignored(), 0);
}

// Each naming reads its position table the way its reference resizes it: antialiased where
// the reference passes antialias=True (timm's resample_abs_pos_embed, HF Dinov2WithRegisters,
// SigLIP 2), point samples elsewhere. The fixtures' interp / shrink / foveated cases check the
// numbers against F.interpolate; this pins which model gets which.
TEST(EncoderPositions, EachNamingSamplesAsItsReference) {
  const std::pair<const char*, PositionSampling> want[] = {
      {"clip", PositionSampling::bicubic},
      {"siglip", PositionSampling::bicubic},
      {"torchvision", PositionSampling::bicubic},
      {"hf_vit", PositionSampling::bicubic},
      {"hf_dinov2", PositionSampling::bicubic},
      {"hf_dinov2_reg", PositionSampling::bicubic_antialias},
      {"timm_vit", PositionSampling::bicubic_antialias},
      {"timm_clip", PositionSampling::bicubic_antialias},
      {"timm_reg", PositionSampling::bicubic_antialias},
      {"siglip2", PositionSampling::bilinear_antialias},
      {"timm_siglip", PositionSampling::bicubic_antialias},
      {"open_clip", PositionSampling::bicubic_antialias},
      {"intern_vit", PositionSampling::bicubic},
      {"idefics3", PositionSampling::bucketized},
      {"blip2", PositionSampling::bicubic},
      {"blip", PositionSampling::bicubic},
  };
  for (const auto& [name, s] : want) EXPECT_EQ(VitModel::load(fixture(name)).config().pos_sampling, s) << name;
}

// The antialiased sampler on its own: the identity on the native grid, weights that sum to one
// (a constant table stays constant for any token size and place), and hostile positions (a side
// of 1e30, NaN or 0, a centre far outside the image) give finite rows, never a crash.
TEST(EncoderPositions, AntialiasedSamplerIdentityNormalisationAndHostileInput) {
  constexpr int G = 5, P = 8;
  constexpr int64_t D = 3;
  std::vector<float> table(size_t(G * G * D));
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(std::sin(0.7 * double(i)) + 0.1 * double(i));
  const std::vector<float> ones(table.size(), 1.0f);
  for (PositionSampling mode : {PositionSampling::bicubic_antialias, PositionSampling::bilinear_antialias}) {
    VitConfig c;
    c.grid = G, c.hidden = int(D), c.patch_px = P, c.pos_sampling = mode;
    const encoder_detail::PositionSampler native(c, table.data(), G * P, G * P, nullptr, 0, 0);
    for (int y = 0; y < G; ++y)
      for (int x = 0; x < G; ++x) {
        const float pos[4] = {(x + 0.5f) * P, (y + 0.5f) * P, float(P), 0};
        float out[D] = {};
        native.add(pos, 4, out);
        for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(out[d], table[size_t((y * G + x) * D + d)], 1e-5) << x << "," << y;
      }
    const encoder_detail::PositionSampler flat(c, ones.data(), 77, 53, nullptr, 0, 0);
    const encoder_detail::PositionSampler real(c, table.data(), 77, 53, nullptr, 0, 0);
    const float cases[][4] = {{10, 10, 8, 0},    {40, 20, 32, 2},  {76, 52, 64, 3},      {0, 0, 1e30f, 9},
                              {5, 5, NAN, 0},    {5, 5, 0, 0},     {-1e30f, 1e30f, 8, 0}, {38, 26, 1e-30f, 0},
                              {1e9f, -3, 16, 1}, {38, 26, 77, 4}};
    for (const auto& pos : cases) {
      float one[D] = {}, out[D] = {};
      flat.add(pos, 4, one);
      real.add(pos, 4, out);
      for (int64_t d = 0; d < D; ++d) {
        EXPECT_NEAR(one[d], 1.0f, 1e-5) << pos[0] << "," << pos[1] << " side " << pos[2];
        EXPECT_TRUE(std::isfinite(out[d]));
      }
    }
  }
}

// A uniform grid whose cells are not square (fovea's uniform mode cuts W/gx × H/gy px cells and
// reports their geometric mean as the side): the reference resizes the table to (gy, gx) whatever
// the cells' shape, so the shrink case's 3×2 tokens stretched to a 24×20 image (8×10 px cells)
// must give the shrink case's reference. The sampler takes each axis's extent from the lattice;
// from the one side (√80 px) the kernel would be wrong on both axes.
TEST(EncoderPositions, UniformGridOfNonSquareCellsIsTheReferenceResize) {
  for (const char* name : {"hf_dinov2_reg", "siglip2", "timm_vit"}) {
    SCOPED_TRACE(name);
    const VitModel m = VitModel::load(fixture(name));
    const SafetensorsFile f = SafetensorsFile::open(fixture(name, "cases.safetensors"));
    for (const Case& k : load_cases(f)) {
      if (k.name != "shrink") continue;
      ASSERT_EQ(k.height, 16);
      Tensor pos = k.positions.clone();
      float* p = pos.data<float>();
      for (int64_t i = 0; i < pos.dim(0); ++i) p[i * 4 + 1] *= 20.0f / 16.0f, p[i * 4 + 2] = std::sqrt(80.0f);
      Executor exec({.threads = 2});
      const Encoding e = encode(m, k.patches, pos, {.image_width = k.width, .image_height = 20}, exec);
      compare(f, k.name, e);
      // The same stretched tokens one at a time (no lattice known) read other positions.
      VitConfig c = m.config();
      c.hidden = 3;
      std::vector<float> table(size_t(c.grid * c.grid * 3));
      for (size_t i = 0; i < table.size(); ++i) table[i] = float(std::sin(0.9 * double(i)));
      const encoder_detail::PositionSampler lattice(c, table.data(), k.width, 20, p, pos.dim(0), 4);
      const encoder_detail::PositionSampler alone(c, table.data(), k.width, 20, nullptr, 0, 0);
      double diff = 0;
      for (int64_t i = 0; i < pos.dim(0); ++i) {
        float a[3] = {}, b[3] = {};
        lattice.add(p + i * 4, 4, a);
        alone.add(p + i * 4, 4, b);
        for (int d = 0; d < 3; ++d) diff = std::max(diff, double(std::fabs(a[d] - b[d])));
      }
      EXPECT_GT(diff, 1e-3);
    }
  }
}

// SigLIP 2: the linear patch embedding's (row, column, channel) columns become the conv layout,
// the position table is resized bilinearly with antialias, and P comes from config.json or the
// column count.
TEST(EncoderLoaders, Siglip2LinearPatchEmbedding) {
  const VitConfig c = VitModel::load(fixture("siglip2")).config();
  EXPECT_EQ(c.naming, "hf_siglip2");
  EXPECT_EQ(c.family, VitFamily::siglip);
  EXPECT_EQ(c.pos_sampling, PositionSampling::bilinear_antialias);
  EXPECT_EQ(c.patch_px, 8);
  EXPECT_EQ(c.grid, 4);
  EXPECT_TRUE(c.attention_pool);
  EXPECT_EQ(VitModel::load(fixture("siglip")).config().pos_sampling, PositionSampling::bicubic);
  nlohmann::json cfg;
  const std::string w = copied_weights(test::temp_dir("enc_siglip2"), "siglip2", &cfg);
  EXPECT_EQ(VitModel::load(w).config().patch_px, 8);  // no config.json: 192 = 8·8·3 columns
  cfg["patch_size"] = 7;
  write_config(w, cfg);
  expect_load_error(w, Errc::corrupt_data, {"patch_embedding.weight has shape [32, 192]"});
  cfg["patch_size"] = 8;
  cfg["num_patches"] = 64;
  write_config(w, cfg);
  expect_load_error(w, Errc::corrupt_data, {"num_patches = 64"});
}

// What says quick_gelu for a timm CLIP tower: model_args.act_layer, else the architecture name, else
// nothing (timm's plain *_clip_* models run exact GELU on the same tensors).
TEST(EncoderLoaders, TimmClipActivationComesFromConfigJson) {
  nlohmann::json cfg;
  const std::string w = copied_weights(test::temp_dir("enc_timm_clip_act"), "timm_clip", &cfg);
  EXPECT_EQ(VitModel::load(w).config().act, Activation::gelu_erf);  // no config.json
  cfg["architecture"] = "vit_base_patch16_clip_224";
  write_config(w, cfg);
  EXPECT_EQ(VitModel::load(w).config().act, Activation::gelu_erf);
  cfg["model_args"]["act_layer"] = "quick_gelu";
  write_config(w, cfg);
  EXPECT_EQ(VitModel::load(w).config().act, Activation::quick_gelu);
  cfg["model_args"]["act_layer"] = "silu";
  write_config(w, cfg);
  expect_load_error(w, Errc::unsupported, {"act_layer 'silu'"});
}

TEST(EncoderLoaders, InputContractsAndTheirSources) {
  EXPECT_EQ(VitModel::load(fixture("hf_vit")).config().input.source, "preprocessor_config.json");
  EXPECT_EQ(VitModel::load(fixture("hf_dinov2")).config().input.source, "preprocessor_config.json");
  const VitConfig timm = VitModel::load(fixture("timm_vit")).config();
  EXPECT_EQ(timm.input.source, "timm config.json pretrained_cfg");
  EXPECT_FLOAT_EQ(timm.input.mean[0], 0.5f);
  EXPECT_FLOAT_EQ(timm.input.std[2], 0.5f);
  // Without the JSON files: each family's published defaults, and the source says so.
  const std::string dir = test::temp_dir("enc_loader_contract");
  for (const char* m : {"hf_vit", "hf_dinov2", "timm_vit"}) {
    fs::create_directories(dir + "/" + m);
    fs::copy_file(fixture(m), dir + "/" + m + "/model.safetensors");
  }
  const VitConfig vit = VitModel::load(dir + "/hf_vit/model.safetensors").config();
  EXPECT_EQ(vit.input.source, "HF ViT defaults 0.5/0.5 (no preprocessor_config.json)");
  EXPECT_FLOAT_EQ(vit.input.mean[1], 0.5f);
  EXPECT_FLOAT_EQ(vit.input.std[1], 0.5f);
  EXPECT_FLOAT_EQ(vit.ln_eps, 1e-12f);  // HF ViT's default without config.json
  const VitConfig dino = VitModel::load(dir + "/hf_dinov2/model.safetensors").config();
  EXPECT_EQ(dino.input.source, "DINOv2 defaults: ImageNet mean/std (no preprocessor_config.json)");
  EXPECT_FLOAT_EQ(dino.input.mean[0], 0.485f);
  EXPECT_FLOAT_EQ(dino.input.std[2], 0.225f);
  const VitConfig bare = VitModel::load(dir + "/timm_vit/model.safetensors").config();
  EXPECT_NE(bare.input.source.find("ImageNet mean/std assumed"), std::string::npos) << bare.input.source;
  EXPECT_FLOAT_EQ(bare.input.mean[2], 0.406f);
  EXPECT_FLOAT_EQ(bare.input.std[0], 0.229f);
  EXPECT_EQ(bare.heads, 1);  // no config: the standard count for the width (64 per head, at least 1)
  // A broken pretrained_cfg is an error, not a silent default.
  std::ofstream(dir + "/timm_vit/config.json") << R"({"pretrained_cfg": {"mean": [0.5, 0.5]}})";
  expect_load_error(dir + "/timm_vit/model.safetensors", Errc::corrupt_data, {"timm config.json pretrained_cfg"});
}

// Re-serialises a fixture with every name prefixed, `drop` removed and `extra` added.
std::string relaid_checkpoint(const std::string& dir, const std::string& model, const std::string& prefix,
                              const std::set<std::string>& drop, const std::map<std::string, Tensor*>& extra) {
  const SafetensorsFile f = SafetensorsFile::open(fixture(model));
  std::vector<Tensor> keep;
  keep.reserve(f.entries().size());
  std::vector<NamedTensor> ts;
  for (const auto& e : f.entries()) {
    if (drop.count(e.name)) continue;
    keep.push_back(f.load(e));
    ts.push_back({prefix + e.name, &keep.back()});
  }
  for (const auto& [name, t] : extra) ts.push_back({name, t});
  fs::create_directories(dir);
  if (fs::exists(fixture(model, "config.json")))  // (open_clip's fixture has none)
    fs::copy_file(fixture(model, "config.json"), dir + "/config.json", fs::copy_options::overwrite_existing);
  save_safetensors(dir + "/model.safetensors", ts);
  return dir + "/model.safetensors";
}

Tensor filled(std::vector<int64_t> shape, float scale, float offset = 0) {
  Tensor t(DType::f32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = offset + scale * std::sin(0.37f * float(i) + 1.0f);
  return t;
}

// timm's SigLIP towers (vit_*_siglip_*: class_token=False, global_pool='map'): no class token,
// `attn_pool` (AttentionPoolLatent) read as SigLIP's pooling head, the head on its output, the
// activation from model_args; the same tensors under open_clip's `visual.trunk.` beside a text
// tower give the same numbers; the layouts it cannot encode are refused by name.
TEST(EncoderLoaders, TimmSiglipAttentionPooling) {
  const VitModel m = VitModel::load(fixture("timm_siglip"));
  const VitConfig& c = m.config();
  EXPECT_EQ(c.naming, "timm_vit");
  EXPECT_EQ(c.family, VitFamily::siglip);
  EXPECT_FALSE(c.class_token);
  EXPECT_TRUE(c.attention_pool);
  EXPECT_EQ(c.act, Activation::gelu_tanh);  // config.json model_args.act_layer
  EXPECT_EQ(c.num_classes, 7);
  EXPECT_EQ(m.tensors_ignored(), 0);

  const std::string dir = test::temp_dir("enc_timm_siglip");
  Tensor tw = filled({16, 32}, 0.2f), tp = filled({8, 32}, 0.1f), ls = filled({1}, 1.0f);
  const VitModel oc = VitModel::load(relaid_checkpoint(
      dir + "/open_clip", "timm_siglip", "visual.trunk.", {},
      {{"text.transformer.resblocks.0.attn.in_proj_weight", &tw}, {"text.positional_embedding", &tp}, {"logit_scale", &ls}}));
  EXPECT_EQ(oc.tensors_ignored(), 3);
  const SafetensorsFile f = SafetensorsFile::open(fixture("timm_siglip", "cases.safetensors"));
  Executor exec({.threads = 2});
  for (const Case& k : load_cases(f)) {
    const Encoding e = encode(oc, k.patches, k.positions, {.image_width = k.width, .image_height = k.height}, exec);
    compare(f, k.name, e);
    EXPECT_FALSE(encoder_detail::present(e.class_token)) << k.name;
    ASSERT_TRUE(encoder_detail::present(e.logits)) << k.name;
  }

  // open_clip's hub files carry open_clip_config.json, not timm's config.json: its
  // preprocess_cfg gives the mean / std.
  fs::remove(dir + "/open_clip/config.json");
  std::ofstream(dir + "/open_clip/open_clip_config.json")
      << R"({"model_cfg": {"embed_dim": 16}, "preprocess_cfg": {"mean": [0.25, 0.5, 0.75], "std": [0.5, 0.5, 0.5]}})";
  const InputContract oc_in = VitModel::load(dir + "/open_clip/model.safetensors").config().input;
  EXPECT_EQ(oc_in.source, "open_clip_config.json preprocess_cfg");
  EXPECT_FLOAT_EQ(oc_in.mean[0], 0.25f);
  EXPECT_FLOAT_EQ(oc_in.mean[2], 0.75f);
  EXPECT_FLOAT_EQ(oc_in.std[1], 0.5f);

  Tensor cls = filled({1, 1, 32}, 0.1f), qn = filled({8}, 1.0f);
  expect_load_error(relaid_checkpoint(dir + "/nopool", "timm_siglip", "", {"attn_pool.latent"}, {}), Errc::unsupported,
                    {"without cls_token", "global_pool='map'"});
  expect_load_error(relaid_checkpoint(dir + "/both", "timm_siglip", "", {}, {{"cls_token", &cls}}), Errc::unsupported,
                    {"both cls_token and attn_pool"});
  expect_load_error(relaid_checkpoint(dir + "/qnorm", "timm_siglip", "", {}, {{"attn_pool.q_norm.weight", &qn}}),
                    Errc::unsupported, {"attn_pool.q_norm.weight", "not supported"});
  expect_load_error(relaid_checkpoint(dir + "/nokv", "timm_siglip", "", {"attn_pool.kv.weight"}, {}),
                    Errc::corrupt_data, {"attn_pool.kv.weight"});
}

// The task heads' layouts: ViTForImageClassification (`vit.` + classifier, no pooler) and
// Dinov2ForImageClassification (`dinov2.` + a classifier over class ⊕ mean patch, not read) hold
// the fixtures' models under a prefix; the embeddings must be the torch reference's.
TEST(EncoderLoaders, ClassificationLayoutsUnderAPrefix) {
  const std::string dir = test::temp_dir("enc_loader_prefix");
  Tensor cw = filled({5, 32}, 0.3f), cb = filled({5}, 0.1f);
  const std::string vit = relaid_checkpoint(dir + "/vit", "hf_vit", "vit.", {"pooler.dense.weight", "pooler.dense.bias"},
                                            {{"classifier.weight", &cw}, {"classifier.bias", &cb}});
  Tensor dw = filled({5, 64}, 0.3f), db = filled({5}, 0.1f);
  const std::string dino = relaid_checkpoint(dir + "/dino", "hf_dinov2", "dinov2.", {},
                                             {{"classifier.weight", &dw}, {"classifier.bias", &db}});
  Executor exec({.threads = 2});
  for (const auto& [path, model] : {std::pair{vit, "hf_vit"}, std::pair{dino, "hf_dinov2"}}) {
    const VitModel m = VitModel::load(path);
    EXPECT_EQ(m.config().naming, model);
    const SafetensorsFile f = SafetensorsFile::open(fixture(model, "cases.safetensors"));
    const std::vector<Case> cases = load_cases(f);
    const Case& c = cases[0];
    const Encoding e = encode(m, c.patches, c.positions, {.image_width = c.width, .image_height = c.height}, exec);
    EXPECT_LE(max_abs_diff(e.embeddings, f.load(*f.find(c.name + ".last_hidden"))), 1e-4) << model;
    EXPECT_LE(max_abs_diff(e.class_token, f.load(*f.find(c.name + ".class_token"))), 1e-4) << model;
    EXPECT_EQ(max_abs_diff(e.pooled, e.class_token), 0.0) << model;  // no pooler: the normed class token
    if (std::string(model) == "hf_vit") {
      EXPECT_EQ(m.config().num_classes, 5);
      ASSERT_TRUE(encoder_detail::present(e.logits));
      for (int k = 0; k < 5; ++k) {
        double want = cb.data<float>()[k];
        for (int j = 0; j < 32; ++j) want += double(cw.data<float>()[k * 32 + j]) * e.class_token.data<float>()[j];
        EXPECT_NEAR(e.logits.data<float>()[k], want, 1e-4) << k;
      }
    } else {
      EXPECT_EQ(m.tensors_ignored(), 2);  // Dinov2ForImageClassification's classifier
      EXPECT_FALSE(encoder_detail::present(e.logits));
    }
  }

  // `fovea model` names the classifier head and what pooled is (text and --json), and the
  // embeddings file says pooled is the class token.
  const std::string identical = "class_token (identical: the final LayerNorm applies to every token)";
  auto r = test::run_cli({"model", vit});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\n  head: classifier, 5 classes (logits from the normed class token)\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\n  pooled: " + identical + "\n"), std::string::npos) << r.out;
  r = test::run_cli({"model", vit, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("pooled_output"), identical);
  ASSERT_EQ(j.at("heads").size(), 1u) << j.at("heads");
  EXPECT_EQ(j.at("heads")[0].at("kind"), "classifier");
  EXPECT_EQ(j.at("heads")[0].at("output"), "logits");
  EXPECT_EQ(j.at("heads")[0].at("width"), 5);
  EXPECT_EQ(j.at("heads")[0].at("input"), "the normed class token");
  EXPECT_EQ(j.at("heads")[0].at("description"), "classifier, 5 classes (logits from the normed class token)");
  // The Dinov2 classifier is not read, so not a head.
  r = test::run_cli({"model", dino, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.at("heads").empty()) << j.at("heads");
  EXPECT_EQ(j.at("pooled_output"), identical);
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(48, 40, 3), image);
  r = test::run_cli({"encode", image, "--model", vit, "--budget", "12", "-o", dir + "/e.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile out = SafetensorsFile::open(dir + "/e.safetensors");
  EXPECT_EQ(out.metadata().at("pooled_output"), identical);
  EXPECT_EQ(max_abs_diff(out.load(*out.find("pooled")), out.load(*out.find("class_token"))), 0.0);
}

// `fovea model` names every head a checkpoint has, and what pooled is: HF ViTModel's pooler,
// CLIP's projection, SigLIP's attention pool (timm's with a classifier after it), torchvision's
// classifier; a LLaVA tower has none and no pooled output.
TEST(CliModel, NamesTheHeadsAndThePooledOutput) {
  const struct {
    const char* fixture;
    const char* pooled;  // "" for none (JSON null)
    std::vector<std::string> heads;
  } cases[] = {
      {"hf_vit", "tanh(pooler.dense(the normed class token))",
       {"pooler, 32 wide (pooled from the normed class token, through tanh(pooler.dense))"}},
      {"clip_full", "post_layernorm(class token)",
       {"projection, 24 wide (image_embeds from pooled: post_layernorm(class token))"}},
      {"siglip", "attention-pool head (a learned probe attends to every patch token)",
       {"attention-pool, 32 wide (pooled from every patch token, attended by a learned probe)"}},
      {"timm_siglip", "attention-pool head (a learned probe attends to every patch token)",
       {"attention-pool, 32 wide (pooled from every patch token, attended by a learned probe)",
        "classifier, 7 classes (logits from the attention pool's output)"}},
      {"torchvision", "class_token (identical: the final LayerNorm applies to every token)",
       {"classifier, 10 classes (logits from the normed class token)"}},
      {"hf_llava", "", {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fixture);
    const auto r = test::run_cli({"model", fixture(c.fixture), "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    if (*c.pooled) EXPECT_EQ(j.at("pooled_output"), c.pooled);
    else EXPECT_TRUE(j.at("pooled_output").is_null()) << j.at("pooled_output");
    std::vector<std::string> heads;
    for (const auto& h : j.at("heads")) heads.push_back(h.at("description").get<std::string>());
    EXPECT_EQ(heads, c.heads);
    const auto text = test::run_cli({"model", fixture(c.fixture)});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    for (const std::string& h : c.heads) EXPECT_NE(text.out.find("  head: " + h + "\n"), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("  pooled: ") != std::string::npos, *c.pooled != 0) << text.out;
  }
}

// timm's layer scale (DeiT III: blocks.N.ls1/ls2.gamma) is read and folded: gammas of one give
// the fixture's model, gammas of two do not.
TEST(EncoderLoaders, TimmLayerScaleIsRead) {
  const std::string dir = test::temp_dir("enc_loader_ls");
  std::vector<Tensor> g;
  g.reserve(8);
  std::map<std::string, Tensor*> ones, twos;
  for (int i = 0; i < 2; ++i)
    for (const char* ls : {"ls1", "ls2"}) {
      const std::string n = "blocks." + std::to_string(i) + "." + ls + ".gamma";
      g.push_back(filled({32}, 0.0f, 1.0f));
      ones[n] = &g.back();
      g.push_back(filled({32}, 0.0f, 2.0f));
      twos[n] = &g.back();
    }
  const VitModel one = VitModel::load(relaid_checkpoint(dir + "/one", "timm_vit", "", {}, ones));
  const VitModel two = VitModel::load(relaid_checkpoint(dir + "/two", "timm_vit", "", {}, twos));
  EXPECT_EQ(one.tensors_used(), VitModel::load(fixture("timm_vit")).tensors_used() + 4);
  const SafetensorsFile f = SafetensorsFile::open(fixture("timm_vit", "cases.safetensors"));
  const std::vector<Case> cases = load_cases(f);
  const Case& c = cases[0];
  Executor exec({.threads = 2});
  const EncodeParams p{.image_width = c.width, .image_height = c.height};
  const Tensor want = f.load(*f.find(c.name + ".last_hidden"));
  EXPECT_LE(max_abs_diff(encode(one, c.patches, c.positions, p, exec).embeddings, want), 1e-4);
  EXPECT_GT(max_abs_diff(encode(two, c.patches, c.positions, p, exec).embeddings, want), 1e-2);
}

// no_embed_class (DeiT III): pos_embed holds only the G·G grid and the class token gets no
// position. The fixture rewritten so (its class position added into cls_token) is the same model.
TEST(EncoderLoaders, TimmWithoutAClassPosition) {
  const std::string dir = test::temp_dir("enc_loader_noembed");
  const SafetensorsFile src = SafetensorsFile::open(fixture("timm_vit"));
  const Tensor pos = src.load(*src.find("pos_embed")), cls = src.load(*src.find("cls_token"));
  Tensor grid(DType::f32, {1, 16, 32}), cls2(DType::f32, {1, 1, 32});
  std::memcpy(grid.bytes(), pos.bytes() + 32 * 4, 16 * 32 * 4);
  for (int d = 0; d < 32; ++d) cls2.data<float>()[d] = cls.data<float>()[d] + pos.data<float>()[d];
  const VitModel m =
      VitModel::load(relaid_checkpoint(dir, "timm_vit", "", {"pos_embed", "cls_token"}, {{"pos_embed", &grid}, {"cls_token", &cls2}}));
  EXPECT_EQ(m.config().grid, 4);
  const SafetensorsFile f = SafetensorsFile::open(fixture("timm_vit", "cases.safetensors"));
  Executor exec({.threads = 2});
  for (const Case& c : load_cases(f)) {
    const Encoding e = encode(m, c.patches, c.positions, {.image_width = c.width, .image_height = c.height}, exec);
    EXPECT_LE(compare(f, c.name, e), 1e-4) << c.name;
  }
}

TEST(EncoderLoaders, NamesEveryMissingOrMisShapedTensor) {
  const std::string dir = test::temp_dir("enc_loader_missing");
  expect_load_error(edited_checkpoint(dir + "/vit", "hf_vit", {"encoder.layer.1.intermediate.dense.bias"},
                                      {{"encoder.layer.0.attention.attention.key.weight", {32, 31}}}, {"layernorm.bias"}),
                    Errc::corrupt_data,
                    {"is not a complete HF ViT checkpoint", "missing 1 tensor(s): encoder.layer.1.intermediate.dense.bias [64]",
                     "encoder.layer.0.attention.attention.key.weight has shape [32, 31], expected [32, 32]",
                     "layernorm.bias has dtype I32"});
  expect_load_error(edited_checkpoint(dir + "/dino", "hf_dinov2", {"encoder.layer.0.layer_scale2.lambda1"},
                                      {{"encoder.layer.1.layer_scale1.lambda1", {31}}}, {}),
                    Errc::corrupt_data,
                    {"is not a complete HF DINOv2 checkpoint", "missing 1 tensor(s): encoder.layer.0.layer_scale2.lambda1 [32]",
                     "encoder.layer.1.layer_scale1.lambda1 has shape [31], expected [32]"});
  expect_load_error(edited_checkpoint(dir + "/timm", "timm_vit", {"norm.bias", "blocks.0.attn.proj.weight"},
                                      {{"blocks.1.attn.qkv.weight", {96, 31}}}, {}),
                    Errc::corrupt_data,
                    {"is not a complete timm VisionTransformer checkpoint", "missing 2 tensor(s)",
                     "blocks.0.attn.proj.weight [32, 32]", "norm.bias [32]",
                     "blocks.1.attn.qkv.weight has shape [96, 31], expected [96, 32]"});
  // The command line: one line, non-zero exit, the tensor named.
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(32, 32, 3), image);
  const std::string timm = edited_checkpoint(dir + "/timm2", "timm_vit", {"blocks.1.mlp.fc2.bias"}, {}, {});
  expect_one_line_error(test::run_cli({"encode", image, "--model", timm, "-o", dir + "/o.safetensors"}), 1,
                        "blocks.1.mlp.fc2.bias [32]");
}

// DINOv2 with registers (HF Dinov2WithRegistersModel, timm reg_token): R rows after the class
// token, in every attention, in no output; the fixtures above check the outputs against torch.
TEST(EncoderRegisters, ConfigAndChecks) {
  for (const char* name : {"hf_dinov2_reg", "timm_reg"}) {
    const VitModel m = VitModel::load(fixture(name));
    EXPECT_EQ(m.config().registers, 4) << name;
    EXPECT_TRUE(m.config().class_token) << name;
    EXPECT_EQ(m.tensors_ignored(), 0) << name;
  }
  EXPECT_EQ(VitModel::load(fixture("hf_dinov2")).config().registers, 0);
  EXPECT_EQ(VitModel::load(fixture("hf_dinov2_reg")).config().family, VitFamily::dinov2);
  // config.json's num_register_tokens must agree with the tensor.
  const std::string dir = test::temp_dir("enc_registers");
  nlohmann::json cfg;
  const std::string w = copied_weights(dir, "hf_dinov2_reg", &cfg);
  cfg["num_register_tokens"] = 3;
  write_config(w, cfg);
  expect_load_error(w, Errc::corrupt_data, {"num_register_tokens = 3", "say 4"});
  // A reg_token that is not [1, R, D].
  Tensor bad = filled({4, 32}, 0.1f);
  expect_load_error(relaid_checkpoint(dir + "/badreg", "timm_reg", "", {"reg_token"}, {{"reg_token", &bad}}),
                    Errc::corrupt_data, {"reg_token has shape [4, 32]"});
}

// timm without no_embed_class: pos_embed is [1, 1 + R + G·G, D] and the registers' rows are their
// positions. The same model written that way (the class position zero, the registers' positions
// moved out of reg_token into pos_embed) encodes to the same numbers.
TEST(EncoderRegisters, TimmRegisterPositionsAreFoldedIntoTheTokens) {
  const std::string dir = test::temp_dir("enc_timm_regpos");
  const SafetensorsFile src = SafetensorsFile::open(fixture("timm_reg"));
  const Tensor reg = src.load(*src.find("reg_token")), grid = src.load(*src.find("pos_embed"));
  const int64_t R = 4, D = 32, GG = grid.dim(1);
  Tensor shift = filled({1, R, D}, 0.0f), reg2 = filled({1, R, D}, 0.0f), pos = filled({1, 1 + R + GG, D}, 0.0f);
  for (int64_t i = 0; i < R * D; ++i) {
    shift.data<float>()[i] = 0.25f * float(i % 7) - 0.5f;
    reg2.data<float>()[i] = reg.data<float>()[i] - shift.data<float>()[i];
    pos.data<float>()[D + i] = shift.data<float>()[i];
  }
  std::memcpy(pos.data<float>() + (1 + R) * D, grid.data<float>(), size_t(GG * D) * 4);
  const VitModel a = VitModel::load(fixture("timm_reg"));
  const VitModel b =
      VitModel::load(relaid_checkpoint(dir, "timm_reg", "", {"reg_token", "pos_embed"}, {{"reg_token", &reg2}, {"pos_embed", &pos}}));
  EXPECT_EQ(b.config().registers, 4);
  const SafetensorsFile f = SafetensorsFile::open(fixture("timm_reg", "cases.safetensors"));
  Executor exec({.threads = 2});
  for (const Case& c : load_cases(f)) {
    const EncodeParams p{.image_width = c.width, .image_height = c.height};
    const Encoding ea = encode(a, c.patches, c.positions, p, exec), eb = encode(b, c.patches, c.positions, p, exec);
    EXPECT_LE(max_abs_diff(ea.embeddings, eb.embeddings), 1e-4) << c.name;
    EXPECT_LE(max_abs_diff(ea.logits, eb.logits), 1e-4) << c.name;
  }
}

// The registers take part in hierarchical attention (as the class token: attended exactly) and
// in the video path's incremental encoder, which must agree with encode().
// (hf_dinov2_swiglu: the same with a SwiGLU MLP, which the incremental encoder shares.)
TEST(EncoderRegisters, HierarchicalAndIncrementalAgreeWithEncode) {
  for (const char* name : {"hf_dinov2_reg", "hf_dinov2_swiglu"}) {
    SCOPED_TRACE(name);
    const VitModel m = VitModel::load(fixture(name));
    const SafetensorsFile f = SafetensorsFile::open(fixture(name, "cases.safetensors"));
    Executor exec({.threads = 2});
    for (const Case& c : load_cases(f)) {
      EncodeParams p{.image_width = c.width, .image_height = c.height};
      const Encoding exact = encode(m, c.patches, c.positions, p, exec);
      p.attention = parse_attention("hierarchical:1000:4");  // every block: exact
      const Encoding h = encode(m, c.patches, c.positions, p, exec);
      EXPECT_LE(max_abs_diff(exact.embeddings, h.embeddings), 1e-4) << c.name;
      EXPECT_LE(max_abs_diff(exact.class_token, h.class_token), 1e-4) << c.name;
      IncrementalEncoder inc(m);
      IncrementalParams ip{.image_width = c.width, .image_height = c.height, .reuse_layers = false};
      const IncrementalResult r0 = inc.encode(c.patches, c.positions, {}, {}, ip, exec);
      EXPECT_LE(max_abs_diff(r0.embeddings, exact.embeddings), 1e-4) << c.name;
      const int64_t N = c.patches.dim(0);
      std::vector<int64_t> prev(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) prev[size_t(i)] = i;
      const std::vector<uint8_t> clean(static_cast<size_t>(N), 0);
      ip.reuse_layers = true;
      const IncrementalResult r1 = inc.encode(c.patches, c.positions, prev, clean, ip, exec);
      const IncrementalResult r2 = inc.encode(c.patches, c.positions, prev, clean, ip, exec);
      EXPECT_EQ(std::count(r2.recomputed.begin(), r2.recomputed.end(), 1), 0) << c.name;
      EXPECT_LE(max_abs_diff(r2.embeddings, exact.embeddings), 1e-4) << c.name;
      EXPECT_EQ(0, std::memcmp(r1.embeddings.bytes(), r2.embeddings.bytes(), r1.embeddings.size_bytes())) << c.name;
    }
  }
}

// open_clip's own VisionTransformer (and OpenAI's CLIP names): `visual.*` beside a text tower,
// open_clip_config.json's quick_gelu / head_width / preprocess_cfg, the same numbers from the
// .bin (torch.save) as from the safetensors file, the activation without a config (OpenAI's
// markers: quick_gelu; else open_clip's exact GELU), and the refusals.
TEST(EncoderLoaders, OpenClipVisionTransformer) {
  const VitModel m = VitModel::load(fixture("open_clip"));
  const VitConfig& c = m.config();
  EXPECT_EQ(c.naming, "open_clip");
  EXPECT_EQ(c.family, VitFamily::clip);
  EXPECT_EQ(c.act, Activation::quick_gelu);
  EXPECT_EQ(c.heads, 4);  // width 32 / head_width 8
  EXPECT_EQ(c.projection_dim, 24);
  EXPECT_TRUE(c.pre_norm);
  EXPECT_EQ(c.final_norm, FinalNorm::all_tokens);
  EXPECT_EQ(c.input.source, "open_clip_config.json preprocess_cfg");
  EXPECT_FLOAT_EQ(c.input.mean[1], 0.4f);
  EXPECT_EQ(m.tensors_ignored(), 6);  // the text tower and logit_scale

  const SafetensorsFile f = SafetensorsFile::open(fixture("open_clip", "cases.safetensors"));
  const VitModel bin = VitModel::load(fixture("open_clip", "open_clip_pytorch_model.bin"));
  Executor exec({.threads = 2});
  for (const Case& k : load_cases(f)) {
    const Encoding e = encode(bin, k.patches, k.positions, {.image_width = k.width, .image_height = k.height}, exec);
    compare(f, k.name, e);
    ASSERT_TRUE(encoder_detail::present(e.image_embeds)) << k.name;
  }

  // Re-laid copies (the tensors as they are, or with some dropped / added): no JSON beside them.
  const std::string dir = test::temp_dir("enc_open_clip");
  auto relaid = [&](const std::string& sub, const std::set<std::string>& drop, const std::map<std::string, Tensor*>& extra) {
    return relaid_checkpoint(dir + "/" + sub, "open_clip", "", drop, extra);
  };
  const VitModel bare = VitModel::load(relaid("bare", {}, {}));
  EXPECT_EQ(bare.config().act, Activation::gelu_erf);  // open_clip's default nn.GELU
  EXPECT_EQ(bare.config().heads, 1);                   // no head_width: the standard count for the width
  EXPECT_NE(bare.config().input.source.find("open_clip defaults"), std::string::npos) << bare.config().input.source;
  Tensor one = filled({1}, 1.0f), q = filled({1, 1, 32}, 0.1f);
  EXPECT_EQ(VitModel::load(relaid("openai", {}, {{"input_resolution", &one}, {"context_length", &one}})).config().act,
            Activation::quick_gelu);  // OpenAI's own state dicts
  expect_load_error(relaid("coca", {}, {{"visual.attn_pool.query", &q}}), Errc::unsupported,
                    {"visual.attn_pool.query", "attentional pooling"});
  expect_load_error(relaid("noproj", {"visual.ln_post.bias"}, {}), Errc::corrupt_data, {"visual.ln_post.bias"});
  const std::string avg = relaid("avg", {}, {});
  std::ofstream(dir + "/avg/open_clip_config.json") << R"({"model_cfg": {"vision_cfg": {"pool_type": "avg"}}})";
  expect_load_error(avg, Errc::unsupported, {"pool_type 'avg'"});
}

// InternViT inside an InternVL chat checkpoint: `vision_model.` with fused qkv, ls1 / ls2 and no
// final norm; the pixel-shuffle projector (mlp1) and the language model are ignored; the
// InternViT-6B variants (RMSNorm, qk normalisation) are refused by name.
TEST(EncoderLoaders, InternVit) {
  const VitModel m = VitModel::load(fixture("intern_vit"));
  const VitConfig& c = m.config();
  EXPECT_EQ(c.naming, "intern_vit");
  EXPECT_EQ(c.final_norm, FinalNorm::none);
  EXPECT_EQ(c.act, Activation::gelu_erf);
  EXPECT_TRUE(c.class_token);
  EXPECT_EQ(c.projector, ProjectorType::none);
  EXPECT_EQ(m.tensors_ignored(), 7);  // mlp1.* and the language model's tensor
  EXPECT_NE(embedding_output(c).find("InternVL's mlp1"), std::string::npos) << embedding_output(c);
  EXPECT_NE(c.input.source.find("InternVL"), std::string::npos) << c.input.source;

  const std::string dir = test::temp_dir("enc_intern_vit");
  nlohmann::json cfg;
  fs::create_directories(dir + "/rms");
  const std::string rms = copied_weights(dir + "/rms", "intern_vit", &cfg);
  cfg["vision_config"]["norm_type"] = "rms_norm";
  write_config(rms, cfg);
  expect_load_error(rms, Errc::unsupported, {"norm_type 'rms_norm'"});
  expect_load_error(edited_checkpoint(dir + "/nobias", "intern_vit", {"vision_model.encoder.layers.0.norm1.bias"}, {}, {}),
                    Errc::unsupported, {"norm1.bias", "RMSNorm"});
  Tensor qn = filled({32}, 1.0f);
  relaid_checkpoint(dir + "/qk", "intern_vit", "", {}, {{"vision_model.encoder.layers.0.attn.q_norm.weight", &qn}});
  expect_load_error(dir + "/qk/model.safetensors", Errc::unsupported, {"attn.q_norm.weight", "qk_normalization"});
}

// Idefics3 / SmolVLM (and Idefics2): SigLIP's tensors under `model.vision_model.`, told apart by
// config.json's model_type or, without it, by the connector beside the tower; their positions are
// bucketized, not resized. The connector and the language model are ignored.
TEST(EncoderLoaders, Idefics3BucketizedPositions) {
  const VitModel m = VitModel::load(fixture("idefics3"));
  const VitConfig& c = m.config();
  EXPECT_EQ(c.naming, "hf_idefics3");
  EXPECT_EQ(c.family, VitFamily::siglip);
  EXPECT_EQ(c.pos_sampling, PositionSampling::bucketized);
  EXPECT_FALSE(c.class_token);
  EXPECT_FALSE(c.attention_pool);
  EXPECT_EQ(c.final_norm, FinalNorm::all_tokens);
  EXPECT_EQ(m.tensors_ignored(), 3);  // the connector, the language model's two tensors
  EXPECT_NE(embedding_output(c).find("Idefics3's connector"), std::string::npos) << embedding_output(c);
  EXPECT_EQ(c.input.source, "preprocessor_config.json");

  const std::string dir = test::temp_dir("enc_idefics3");
  const std::string bare = relaid_checkpoint(dir + "/bare", "idefics3", "", {}, {});
  fs::remove(dir + "/bare/config.json");
  EXPECT_EQ(VitModel::load(bare).config().naming, "hf_idefics3");  // the connector says so
  Tensor latents = filled({4, 32}, 1.0f);
  const std::string v2 = relaid_checkpoint(dir + "/v2", "idefics3", "", {"model.connector.modality_projection.proj.weight"},
                                           {{"model.connector.perceiver_resampler.latents", &latents}});
  fs::remove(dir + "/v2/config.json");
  EXPECT_EQ(VitModel::load(v2).config().naming, "hf_idefics2");
  EXPECT_EQ(VitModel::load(v2).config().pos_sampling, PositionSampling::bucketized);
  const std::string plain = relaid_checkpoint(dir + "/plain", "idefics3", "", {"model.connector.modality_projection.proj.weight"}, {});
  fs::remove(dir + "/plain/config.json");
  EXPECT_EQ(VitModel::load(plain).config().naming, "hf_siglip");  // nothing says Idefics: a SigLIP tower
  EXPECT_EQ(VitModel::load(plain).config().pos_sampling, PositionSampling::bicubic);
  EXPECT_TRUE(VitModel::load(plain).config().ignored_projector.empty());
  // Gemma 3: a SigLIP tower under vision_tower. beside a pooling projector, which is not run.
  Tensor proj = filled({32, 16}, 0.1f);
  const std::string g3 = relaid_checkpoint(dir + "/gemma3", "siglip", "vision_tower.", {},
                                           {{"multi_modal_projector.mm_input_projection_weight", &proj}});
  const VitConfig c3 = VitModel::load(g3).config();
  EXPECT_EQ(c3.naming, "hf_siglip");
  EXPECT_NE(embedding_output(c3).find("Gemma 3's projector"), std::string::npos) << embedding_output(c3);
  EXPECT_TRUE(VitModel::load(fixture("siglip")).config().ignored_projector.empty());
  // Phi-3-vision: a CLIP tower under vision_embed_tokens.img_processor. beside img_projection.
  Tensor p0 = filled({48, 128}, 0.1f);
  const std::string phi = relaid_checkpoint(dir + "/phi3v", "clip", "model.vision_embed_tokens.img_processor.", {},
                                            {{"model.vision_embed_tokens.img_projection.0.weight", &p0}});
  const VitConfig cp = VitModel::load(phi).config();
  EXPECT_EQ(cp.naming, "hf_clip");
  EXPECT_NE(embedding_output(cp).find("Phi-3-vision's img_projection"), std::string::npos) << embedding_output(cp);
}

// The bucketized lookup against transformers' own Idefics3VisionEmbeddings on uniform grids
// (buckets.safetensors, written by the fixture script from torch.bucketize): tables of 4, 26
// (Idefics3), 32 (SmolVLM) and 70 (Idefics2) cells a side, n = 1 .. G+3 and around 2G and 3G
// patches a side, as a lattice and token by token.
TEST(EncoderPositions, BucketizedIsIdefics3sLookup) {
  const SafetensorsFile f = SafetensorsFile::open(fixture("idefics3", "buckets.safetensors"));
  const Tensor rows = f.load(*f.find("buckets"));
  const int32_t* r = rows.data<int32_t>();
  const int64_t total = rows.numel();
  int grids = 0;
  for (int64_t at = 0; at < total;) {
    const int G = r[at], n = r[at + 1];
    const int32_t* want = r + at + 2;
    at += 2 + n;
    ASSERT_LE(at, total);
    VitConfig c;
    c.grid = G, c.hidden = 1, c.patch_px = 7, c.pos_sampling = PositionSampling::bucketized;
    std::vector<float> table(size_t(G) * size_t(G));
    for (size_t i = 0; i < table.size(); ++i) table[i] = float(i);
    std::vector<float> pos;
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) pos.insert(pos.end(), {(x + 0.5f) * 7, (y + 0.5f) * 7, 7.0f, 0.0f});
    const encoder_detail::PositionSampler lattice(c, table.data(), 7 * n, 7 * n, pos.data(), int64_t(n) * n, 4);
    const encoder_detail::PositionSampler alone(c, table.data(), 7 * n, 7 * n, nullptr, 0, 0);
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        const float* p = pos.data() + (int64_t(y) * n + x) * 4;
        float a = 0, b = 0;
        lattice.add(p, 4, &a);
        alone.add(p, 4, &b);
        const float cell = float(want[y] * G + want[x]);
        ASSERT_EQ(a, cell) << "G " << G << " n " << n << " patch " << x << "," << y;
        ASSERT_EQ(b, cell) << "G " << G << " n " << n << " patch " << x << "," << y;
      }
    ++grids;
  }
  EXPECT_GT(grids, 100);
  // Hostile positions stay in the table.
  VitConfig c;
  c.grid = 4, c.hidden = 1, c.patch_px = 8, c.pos_sampling = PositionSampling::bucketized;
  std::vector<float> table(16);
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(i);
  const encoder_detail::PositionSampler s(c, table.data(), 77, 53, nullptr, 0, 0);
  const float cases[][4] = {{-1e30f, 1e30f, 8, 0}, {5, 5, NAN, 0}, {1e9f, -3, 16, 1}, {0, 0, 1e30f, 9}, {38, 26, 0, 0}};
  for (const auto& p : cases) {
    float out = 0;
    s.add(p, 4, &out);
    EXPECT_GE(out, 0.0f);
    EXPECT_LE(out, 15.0f);
  }
}

// BLIP / BLIP-2 / InstructBLIP towers: fused qkv with its own bias (BLIP) or q_bias / v_bias and no
// key bias (BLIP-2's EVA ViT-g), post_layernorm on every token and pooler_output normed twice (the
// fixtures check the numbers); the Q-Former, projection and language tensors are ignored; a
// missing v_bias is named.
TEST(EncoderLoaders, BlipAndBlip2) {
  const VitModel m2 = VitModel::load(fixture("blip2"));
  EXPECT_EQ(m2.config().naming, "hf_blip2");
  EXPECT_EQ(m2.config().ln_eps, 1e-6f);
  EXPECT_TRUE(m2.config().pooled_normed_twice);
  EXPECT_EQ(m2.config().final_norm, FinalNorm::all_tokens);
  EXPECT_EQ(m2.tensors_ignored(), 3);
  EXPECT_EQ(m2.config().input.source, "preprocessor_config.json");
  const VitModel m1 = VitModel::load(fixture("blip"));
  EXPECT_EQ(m1.config().naming, "hf_blip");
  EXPECT_EQ(m1.config().ln_eps, 1e-5f);
  EXPECT_EQ(m1.tensors_ignored(), 1);
  const std::string dir = test::temp_dir("enc_blip");
  expect_load_error(edited_checkpoint(dir + "/nov", "blip2", {"vision_model.encoder.layers.1.self_attn.v_bias"}, {}, {}),
                    Errc::corrupt_data, {"BLIP-2", "layers.1.self_attn.v_bias"});
  // Without config.json: BLIP-2's eps from the bias layout.
  const std::string bare = relaid_checkpoint(dir + "/bare", "blip2", "", {}, {});
  fs::remove(dir + "/bare/config.json");
  EXPECT_EQ(VitModel::load(bare).config().ln_eps, 1e-6f);
}

// PaliGemma: the SigLIP tower's last_hidden_state through multi_modal_projector.linear, divided by
// √(text_config.hidden_size) (the fixtures check the numbers); the scale follows config.json.
TEST(EncoderLoaders, PaliGemmaLinearProjector) {
  const VitModel m = VitModel::load(fixture("paligemma"));
  const VitConfig& c = m.config();
  EXPECT_EQ(c.naming, "hf_paligemma");
  EXPECT_EQ(c.projector, ProjectorType::linear);
  EXPECT_EQ(c.projector_dim, 24);
  EXPECT_EQ(c.final_norm, FinalNorm::all_tokens);
  EXPECT_EQ(m.tensors_ignored(), 1);
  const SafetensorsFile f = SafetensorsFile::open(fixture("paligemma", "cases.safetensors"));
  const std::vector<Case> cases = load_cases(f);
  const Case& k = cases.front();
  Executor exec({.threads = 2});
  const Encoding want = encode(m, k.patches, k.positions, {.image_width = k.width, .image_height = k.height}, exec);
  nlohmann::json cfg;
  const std::string w = copied_weights(test::temp_dir("enc_paligemma"), "paligemma", &cfg);
  cfg["text_config"]["hidden_size"] = 96;  // 4× the width: projected halves
  write_config(w, cfg);
  const Encoding half =
      encode(VitModel::load(w), k.patches, k.positions, {.image_width = k.width, .image_height = k.height}, exec);
  ASSERT_EQ(half.projected.numel(), want.projected.numel());
  for (int64_t i = 0; i < want.projected.numel(); ++i)
    ASSERT_NEAR(half.projected.data<float>()[i], 0.5f * want.projected.data<float>()[i], 1e-5f) << i;
  cfg["text_config"]["hidden_size"] = 0;
  write_config(w, cfg);
  expect_load_error(w, Errc::corrupt_data, {"text_config.hidden_size 0"});
}

// config.json values of the wrong kind are one clear error each, never a silent default or an
// undefined conversion (nlohmann casts 1e30 to int without a word): a float where an integer
// belongs, an out-of-range integer, a non-object vision_config / text_config, a non-string
// model_type, a layer-norm epsilon outside (0, 1).
TEST(EncoderCheckpoint, HostileConfigValuesAreClearErrors) {
  const std::string dir = test::temp_dir("enc_hostile_cfg");
  struct Case {
    const char* fixture;
    std::function<void(nlohmann::json&)> edit;
    const char* says;
  } cases[] = {
      {"siglip", [](nlohmann::json& c) { c["num_attention_heads"] = 1e30; }, "'num_attention_heads' = 1e+30 is not an integer"},
      {"siglip", [](nlohmann::json& c) { c["num_attention_heads"] = 3.5; }, "'num_attention_heads' = 3.5"},
      {"siglip", [](nlohmann::json& c) { c["num_attention_heads"] = uint64_t(1) << 63; }, "is out of range"},
      {"siglip", [](nlohmann::json& c) { c["num_attention_heads"] = int64_t(-1) << 40; }, "is out of range"},
      {"siglip", [](nlohmann::json& c) { c["layer_norm_eps"] = -1.0; }, "layer norm epsilon"},
      {"siglip", [](nlohmann::json& c) { c["layer_norm_eps"] = 0.0; }, "layer norm epsilon"},
      {"siglip", [](nlohmann::json& c) { c["model_type"] = 5; }, "'model_type' has the wrong type"},
      {"clip_full", [](nlohmann::json& c) { c["vision_config"] = nlohmann::json::array({1}); }, "'vision_config' is not an object"},
      {"paligemma", [](nlohmann::json& c) { c["text_config"] = "big"; }, "'text_config' is not an object"},
      {"paligemma", [](nlohmann::json& c) { c["text_config"]["hidden_size"] = 1e300; }, "'hidden_size'"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string d = dir + "/" + std::to_string(i++);
    fs::create_directories(d);
    nlohmann::json cfg;
    const std::string w = copied_weights(d, c.fixture, &cfg);
    c.edit(cfg);
    write_config(w, cfg);
    expect_load_error(w, Errc::corrupt_data, {c.says});
  }
  // An integral float is an integer.
  nlohmann::json cfg;
  const std::string w = copied_weights(dir, "siglip", &cfg);
  cfg["num_attention_heads"] = 4.0;
  write_config(w, cfg);
  EXPECT_EQ(VitModel::load(w).config().heads, 4);
}

// `fovea model CKPT`: what the loader understood, without encoding; a bad checkpoint is one line.
TEST(CliModel, DescribesACheckpointWithoutEncoding) {
  auto r = test::run_cli({"model", fixture("idefics3"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("naming"), "hf_idefics3");
  EXPECT_EQ(j.at("position_sampling"), "bucketized");
  EXPECT_EQ(j.at("tensors_ignored"), 3);
  EXPECT_NE(j.at("ignored_projector").get<std::string>().find("connector"), std::string::npos);
  EXPECT_EQ(j.at("preprocessing").at("source"), "preprocessor_config.json");
  r = test::run_cli({"model", fixture("paligemma")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("projected: 24 wide (projector linear)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("naming: hf_paligemma"), std::string::npos) << r.out;
  r = test::run_cli({"model", test::temp_dir("cli_model") + "/missing.safetensors"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("fovea: error:", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(test::run_cli({"model"}).exit_code, 2);
}

// Towers fovea does not run (rotary positions) are refused by name, from config.json or from a
// tensor name, before a loader half-recognises them.
TEST(EncoderLoaders, RotaryTowersAreRefusedByName) {
  const std::string dir = test::temp_dir("enc_rotary");
  Tensor w2 = filled({32, 32}, 0.1f), b1 = filled({32}, 0.1f);
  const std::map<std::string, Tensor*> pixtral = {{"vision_tower.patch_conv.weight", &w2},
                                                  {"vision_tower.ln_pre.weight", &b1}};
  const std::map<std::string, Tensor*> eva = {{"blocks.0.mlp.fc1_g.weight", &w2}, {"patch_embed.proj.weight", &w2}};
  struct Case {
    const char* name;
    const std::map<std::string, Tensor*>* tensors;
    const char* model_type;
    const char* says;
  } cases[] = {{"pixtral", &pixtral, nullptr, "Pixtral"}, {"mistral", &pixtral, "mistral3", "model_type 'mistral3'"},
               {"eva", &eva, nullptr, "EVA"}};
  for (const Case& c : cases) {
    const std::string d = dir + "/" + c.name;
    fs::create_directories(d);
    std::vector<NamedTensor> ts;
    for (const auto& [n, t] : *c.tensors) ts.push_back({n, t});
    save_safetensors(d + "/model.safetensors", ts);
    if (c.model_type) std::ofstream(d + "/config.json") << nlohmann::json{{"model_type", c.model_type}}.dump();
    expect_load_error(d + "/model.safetensors", Errc::unsupported, {c.says, "not supported"});
  }
}

// DINOv2's SwiGLU MLP (dinov2-giant; timm's SwiGLUPacked): fc1 gives [x1 | x2], fc2 reads
// silu(x1)·x2, whatever config.json's hidden_act says. The fixtures check the numbers (and the
// incremental encoder's, which shares the MLP); this checks the configuration read.
TEST(EncoderLoaders, SwigluMlp) {
  for (const char* name : {"hf_dinov2_swiglu", "timm_dinov2_swiglu"}) {
    const VitModel m = VitModel::load(fixture(name));
    const VitConfig& c = m.config();
    EXPECT_EQ(c.act, Activation::swiglu) << name;
    EXPECT_EQ(c.mlp, 48) << name;  // fc2's input; fc1 is [96, 32]
    EXPECT_EQ(c.registers, 4) << name;
    EXPECT_EQ(encoder_detail::fc1_width(c), 96) << name;
    EXPECT_NE(m.describe().find("act=swiglu"), std::string::npos) << m.describe();
    EXPECT_EQ(m.tensors_ignored(), 0) << name;
  }
  const std::string dir = test::temp_dir("enc_swiglu");
  nlohmann::json cfg;
  const std::string w = copied_weights(dir, "hf_dinov2_swiglu", &cfg);
  cfg["use_swiglu_ffn"] = false;
  write_config(w, cfg);
  expect_load_error(w, Errc::corrupt_data, {"use_swiglu_ffn = false", "have mlp.weights_in"});
}

// Relatives under the same names with other arithmetic are refused by name, not encoded wrong.
TEST(EncoderLoaders, RefusesVariantsItCannotEncode) {
  const std::string dir = test::temp_dir("enc_loader_refuse");
  Tensor tok = filled({1, 1, 32}, 0.1f), regs = filled({1, 4, 32}, 0.1f), w = filled({128, 32}, 0.1f);
  expect_load_error(relaid_checkpoint(dir + "/deit", "timm_vit", "", {}, {{"dist_token", &tok}}), Errc::unsupported,
                    {"dist_token", "distilled DeiT"});
  expect_load_error(relaid_checkpoint(dir + "/hfdeit", "hf_vit", "deit.", {}, {{"deit.embeddings.distillation_token", &tok}}),
                    Errc::unsupported, {"deit.embeddings.distillation_token", "distilled DeiT"});
  expect_load_error(relaid_checkpoint(dir + "/vreg", "hf_vit", "", {}, {{"embeddings.register_tokens", &regs}}),
                    Errc::unsupported, {"embeddings.register_tokens", "Dinov2WithRegistersModel's are"});
  expect_load_error(relaid_checkpoint(dir + "/swiglu", "hf_vit", "", {}, {{"encoder.layer.0.mlp.weights_in.weight", &w}}),
                    Errc::unsupported, {"SwiGLU MLP in a HF ViT checkpoint is not supported"});
  // DINOv2's SwiGLU loads (EncoderLoaders.SwigluMlp), but not against its own config.json.
  expect_load_error(relaid_checkpoint(dir + "/swiglu2", "hf_dinov2", "", {}, {{"encoder.layer.0.mlp.weights_in.weight", &w}}),
                    Errc::corrupt_data, {"use_swiglu_ffn = false", "mlp.weights_in"});
  Tensor d = filled({32}, 0.1f);
  expect_load_error(relaid_checkpoint(dir + "/beit", "hf_vit", "beit.", {}, {{"beit.encoder.layer.0.lambda_1", &d}}),
                    Errc::unsupported, {"beit.encoder.layer.0.lambda_1", "BEiT"});
  for (const char* name : {"fc_norm.weight", "blocks.0.attn.q_norm.weight", "blocks.0.mlp.fc1_g.weight",
                           "blocks.0.mlp.norm.weight"}) {
    const std::string sub = dir + "/timm_" + std::string(name).substr(0, std::string(name).find('.'));
    expect_load_error(relaid_checkpoint(sub, "timm_vit", "", {}, {{name, &d}}), Errc::unsupported, {name, "not supported"});
  }
  // config.json naming another model over HF ViT names.
  const std::string mae = relaid_checkpoint(dir + "/mae", "hf_vit", "", {}, {});
  nlohmann::json cfg;
  std::ifstream(fixture("hf_vit", "config.json")) >> cfg;
  cfg["model_type"] = "vit_mae";
  std::ofstream(dir + "/mae/config.json") << cfg.dump();
  expect_load_error(mae, Errc::unsupported, {"model_type 'vit_mae' is not HF ViT"});
  cfg["model_type"] = "vit";
  cfg["num_hidden_layers"] = 3;
  std::ofstream(dir + "/mae/config.json") << cfg.dump();
  expect_load_error(mae, Errc::corrupt_data, {"num_hidden_layers = 3", "2"});
}

// ---- the query-embedding hook and files ------------------------------------------------------------

TEST(EncoderQuery, LoadsNpyAndSafetensors) {
  const std::string dir = test::temp_dir("enc_query");
  // .npy v1, float32, shape (1, 3).
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }";
  header += std::string(128 - 10 - header.size() - 1, ' ') + "\n";
  std::string npy = std::string("\x93NUMPY\x01\x00", 8);
  npy += char(header.size() & 0xff);
  npy += char(header.size() >> 8);
  npy += header;
  const float v[3] = {1.5f, -2.0f, 0.25f};
  npy.append(reinterpret_cast<const char*>(v), 12);
  std::ofstream(dir + "/q.npy", std::ios::binary) << npy;
  EXPECT_EQ(load_query_embedding(dir + "/q.npy"), std::vector<float>({1.5f, -2.0f, 0.25f}));
  std::ofstream(dir + "/bad.npy", std::ios::binary) << npy.substr(0, npy.size() - 2);
  EXPECT_THROW(load_query_embedding(dir + "/bad.npy"), Error);

  Tensor q(DType::f32, {4});
  q.data<float>()[2] = 3;
  save_safetensors(dir + "/q.safetensors", {{"query", &q}});
  EXPECT_EQ(load_query_embedding(dir + "/q.safetensors"), std::vector<float>({0, 0, 3, 0}));
  Tensor m(DType::f32, {2, 4});
  save_safetensors(dir + "/m.safetensors", {{"query", &m}});
  EXPECT_THROW(load_query_embedding(dir + "/m.safetensors"), Error);
}

TEST(EncoderQuery, TileFeaturesFromPatchEmbeddings) {
  const VitModel model = VitModel::load(fixture("clip_full"));
  Executor exec({.threads = 2});
  PyramidU8 pyr = build_pyramid(test::random_image(40, 24, 3, 5), PyramidParams{}, exec);
  const TileGrid g = TileGrid::make(40, 24, 8);
  Normalization norm;
  const Tensor d = tile_feature_fn(model, norm, 32, exec)(pyr, g);
  EXPECT_EQ(d.shape(), std::vector<int64_t>({g.tiles(), 32}));
  const Tensor e = tile_feature_fn(model, norm, 24, exec)(pyr, g);  // through visual_projection
  EXPECT_EQ(e.shape(), std::vector<int64_t>({g.tiles(), 24}));
  EXPECT_THROW(tile_feature_fn(model, norm, 7, exec)(pyr, g), Error);
}

// A query equal to one tile's patch-embedding feature must make that tile the most relevant.
TEST(EncoderQuery, EmbeddingTermFindsTheMatchingTile) {
  const VitModel model = VitModel::load(fixture("clip"));
  Executor exec({.threads = 2});
  ImageU8 img = test::constant_image(64, 48, 3, 120);
  for (int y = 24; y < 32; ++y)  // a coloured 8x8 square on tile (5, 3)
    for (int x = 40; x < 48; ++x) img.row(0, y)[x] = 250, img.row(1, y)[x] = 10, img.row(2, y)[x] = 60;
  TokenizeParams params;
  params.patch_px = 8;
  params.alloc.budget_tokens = 20;
  params.relevance.tile_features = tile_feature_fn(model, params.extract.norm, 32, exec);
  const PyramidU8 pyr = build_pyramid(img.clone(), PyramidParams{}, exec);
  const TileGrid g = TileGrid::make(64, 48, 8);
  const Tensor feats = params.relevance.tile_features(pyr, g);
  const int64_t target = 3 * g.tiles_x + 5;
  Query q;
  q.embedding.assign(feats.data<float>() + target * 32, feats.data<float>() + (target + 1) * 32);
  const Tokenization t = tokenize(std::move(img), q, params, exec);
  const auto& qs = t.relevance.query;
  EXPECT_EQ(std::max_element(qs.begin(), qs.end()) - qs.begin(), target);
  EXPECT_FLOAT_EQ(qs[target], 1.0f);
}

// ---- the command line ------------------------------------------------------------------------------

TEST(EncodeCli, BadCheckpointsGiveOneLineAndNonZeroExit) {
  const std::string dir = test::temp_dir("enc_cli_bad");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 48, 3), image);
  expect_one_line_error(test::run_cli({"encode", image, "--model", dir + "/none.safetensors", "-o", dir + "/o.safetensors"}),
                        1, "none.safetensors");
  std::vector<uint8_t> b = read_bytes(fixture("clip"));
  b.resize(b.size() / 2);
  write_bytes(dir + "/half.safetensors", b);
  expect_one_line_error(test::run_cli({"encode", image, "--model", dir + "/half.safetensors", "-o", dir + "/o.safetensors"}),
                        1, "half.safetensors");
  const std::string missing = edited_checkpoint(dir + "/m", "siglip", {"vision_model.head.probe"}, {}, {});
  expect_one_line_error(test::run_cli({"encode", image, "--model", missing, "-o", dir + "/o.safetensors"}), 1,
                        "vision_model.head.probe");
  expect_one_line_error(test::run_cli({"encode", image, "--model", "random:vit-x"}), 2, "random:vit-x");
  expect_one_line_error(test::run_cli({"encode", image, "--model", fixture("clip"), "--patch", "16"}), 2, "--patch 16");
  expect_one_line_error(test::run_cli({"encode", image, "--model", fixture("clip"), "--dtype", "u8"}), 2, "u8");
  EXPECT_FALSE(fs::exists(dir + "/o.safetensors"));
}

// A checkpoint whose weights are NaN loads (nothing checks weights' values: a pass over them
// would cost the time to first embedding) and encodes to NaN; the command line says so.
TEST(EncodeCli, NonFiniteEmbeddingsGiveAWarning) {
  const std::string dir = test::temp_dir("enc_cli_nan");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 48, 3), image);
  const SafetensorsFile f = SafetensorsFile::open(fixture("clip"));
  std::vector<Tensor> keep;
  std::vector<std::string> names;
  for (const auto& e : f.entries()) {
    keep.push_back(f.load(e));
    names.push_back(e.name);
    if (e.name != "vision_model.encoder.layers.1.mlp.fc2.bias") continue;
    Tensor& t = keep.back();
    ASSERT_EQ(t.dtype(), DType::f32);
    std::fill_n(t.data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<NamedTensor> ts;
  for (size_t i = 0; i < keep.size(); ++i) ts.push_back({names[i], &keep[i]});
  fs::create_directories(dir + "/nan");
  fs::copy_file(fixture("clip", "config.json"), dir + "/nan/config.json");
  save_safetensors(dir + "/nan/model.safetensors", ts);

  const auto r = test::run_cli({"encode", image, "--model", dir + "/nan/model.safetensors", "--budget", "20", "-o",
                                dir + "/e.safetensors", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("fovea: warning: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fovea: warning: the embeddings: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" values are NaN or infinite"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["encoder"]["nonfinite_values"].get<int64_t>(), 0);
  EXPECT_TRUE(fs::exists(dir + "/e.safetensors"));  // a warning: the file is written as computed

  // A batch warns once, naming the first image.
  fs::create_directories(dir + "/imgs");
  for (const char* n : {"a.png", "b.png"}) fs::copy_file(image, dir + "/imgs/" + n);
  const auto b = test::run_cli({"encode", dir + "/imgs", "--model", dir + "/nan/model.safetensors", "--budget", "20",
                                "-o", dir + "/out"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  size_t warnings = 0;
  for (size_t at = b.err.find("NaN or infinite"); at != std::string::npos; at = b.err.find("NaN or infinite", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << b.err;
  EXPECT_NE(b.err.find("a.png"), std::string::npos) << b.err;
}

TEST(EncodeCli, WritesEmbeddingsAndLabelsRandomModels) {
  const std::string dir = test::temp_dir("enc_cli_ok");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 48, 3), image);
  const auto r = test::run_cli({"encode", image, "--model", fixture("clip_full"), "--budget", "20", "-o",
                                dir + "/e.safetensors", "--json", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["encoder"]["random_weights"], false);
  EXPECT_EQ(j["encoder"]["nonfinite_values"], 0);
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  const SafetensorsFile f = SafetensorsFile::open(dir + "/e.safetensors");
  const auto* e = f.find("embeddings");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape[1], 32);
  EXPECT_EQ(f.find("positions")->shape[0], e->shape[0]);
  EXPECT_NE(f.find("image_embeds"), nullptr);
  EXPECT_EQ(f.metadata().at("random_weights"), "false");

  const auto rr = test::run_cli({"encode", image, "--model", "random:vit-tiny", "--budget", "12", "-o",
                                 dir + "/r.safetensors", "--json", "--precision", "bf16", "--threads", "2"});
  ASSERT_EQ(rr.exit_code, 0) << rr.err;
  EXPECT_NE(rr.err.find("RANDOM"), std::string::npos);
  const nlohmann::json jr = nlohmann::json::parse(rr.out);
  EXPECT_EQ(jr["encoder"]["random_weights"], true);
  EXPECT_NE(jr["encoder"]["description"].get<std::string>().find("RANDOM WEIGHTS"), std::string::npos);
  const SafetensorsFile fr = SafetensorsFile::open(dir + "/r.safetensors");
  EXPECT_EQ(fr.metadata().at("random_weights"), "true");
  EXPECT_NE(fr.metadata().at("model_description").find("RANDOM WEIGHTS"), std::string::npos);
}

// --backend vulkan: the pyramid and the patches come from the device, so the embeddings must be
// the CPU's, bit for bit (the sampler is bit-exact). CI has lavapipe, so a Vulkan build without a
// device is a failure here, not a skip.
TEST(EncodeCli, BackendVulkanWritesTheCpuEmbeddings) {
  if (!vulkan_built()) GTEST_SKIP() << "this build has no Vulkan backend";
  ASSERT_TRUE(vulkan_available()) << "a Vulkan build with no usable device (install mesa-vulkan-drivers)";
  const std::string dir = test::temp_dir("enc_cli_vulkan");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(72, 56, 3), image);
  std::vector<uint8_t> bytes[2];
  for (int i = 0; i < 2; ++i) {
    const std::string out = dir + (i ? "/gpu.safetensors" : "/cpu.safetensors");
    const auto r = test::run_cli({"encode", image, "--model", fixture("clip"), "--fixation", "20,30", "--budget", "24",
                                  "--backend", i ? "vulkan" : "cpu", "-o", out, "--json", "--threads", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["backend"], i ? "vulkan" : "cpu");
    bytes[i] = read_bytes(out);
  }
  EXPECT_FALSE(bytes[0].empty());
  EXPECT_TRUE(bytes[0] == bytes[1]) << "--backend vulkan wrote different embeddings";
}

// --store on encode: the embeddings go through a paged TokenStore and the report's accounting
// follows from N, D and the page size.
TEST(EncodeCli, StoreReportsTheEmbeddingsPages) {
  const std::string dir = test::temp_dir("enc_cli_store");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 48, 3), image);
  const auto r = test::run_cli({"encode", image, "--model", fixture("clip"), "--budget", "20", "--store",
                                "--store-page-bytes", "4096", "--json", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& s = j["store"];
  const int64_t n = j["encoder"]["embeddings"][0], d = j["encoder"]["embeddings"][1];
  EXPECT_EQ(s["kept_tokens"].get<int64_t>(), n);
  EXPECT_EQ(s["dim"].get<int64_t>(), d);
  EXPECT_EQ(s["token_bytes"].get<int64_t>(), d * 4);  // f32 embeddings
  EXPECT_EQ(s["dense_tokens"].get<int64_t>(), j["full_resolution_tokens"].get<int64_t>());
  EXPECT_EQ(s["pages"].get<int64_t>(), (n * d * 4 + 4095) / 4096);
  expect_one_line_error(test::run_cli({"encode", image, "--model", fixture("clip"), "--store", "--store-page-bytes", "1000"}),
                        2, "--store-page-bytes");
}

// The CLI runs with the passive OpenMP wait policy unless the environment chooses one
// (the `fovea` launcher, tools/fovea/launcher.cpp, sets it before the CLI proper loads libgomp:
// the program owns the policy, not the library). An empty variable is no choice.
TEST(EncodeCli, OpenMpWaitPolicyIsPassiveUnlessChosen) {
  const std::string dir = test::temp_dir("enc_cli_omp");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(32, 32, 3), image);
  auto policy = [&] {
    const auto r = test::run_cli({"encode", image, "--model", fixture("clip"), "--budget", "8", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["encoder"]["openmp_wait_policy"].get<std::string>() : "";
  };
  const char* saved = std::getenv("OMP_WAIT_POLICY");
  const std::string saved_value = saved ? saved : "";
  ::unsetenv("OMP_WAIT_POLICY");
  ::unsetenv("GOMP_SPINCOUNT");
  EXPECT_EQ(policy(), "PASSIVE");
  ::setenv("OMP_WAIT_POLICY", "", 1);
  EXPECT_EQ(policy(), "PASSIVE");
  ::setenv("OMP_WAIT_POLICY", "active", 1);
  EXPECT_EQ(policy(), "active");
  if (saved) ::setenv("OMP_WAIT_POLICY", saved_value.c_str(), 1);
  else ::unsetenv("OMP_WAIT_POLICY");
}

// `encode --json`'s timings_ms.total covers the encode as well as the tokenize stages, and
// timings_total_covers names what it sums.
TEST(EncodeCli, JsonTotalIncludesTheEncode) {
  const std::string dir = test::temp_dir("enc_cli_total");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 48, 3), image);
  const auto r = test::run_cli({"encode", image, "--model", fixture("clip"), "--budget", "20", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& tm = j.at("timings_ms");
  const double tokenize = tm.at("pyramid").get<double>() + tm.at("relevance").get<double>() +
                          tm.at("allocate").get<double>() + tm.at("extract").get<double>();
  EXPECT_NEAR(tm.at("tokenize").get<double>(), tokenize, 1e-9 * (1 + tokenize));
  EXPECT_GT(tm.at("encode").get<double>(), 0.0);
  EXPECT_GE(tm.at("total").get<double>(), tokenize + tm.at("encode").get<double>() - 1e-9 * (1 + tokenize));
  EXPECT_EQ(j.at("timings_total_covers"),
            nlohmann::json({"pyramid", "relevance", "allocate", "extract", "encode"}));
  double covered = 0;
  for (const auto& stage : j.at("timings_total_covers")) covered += tm.at(stage.get<std::string>()).get<double>();
  EXPECT_NEAR(tm.at("total").get<double>(), covered, 1e-9 * (1 + covered));
}

// bf16 needs bf16 matrix kernels (oneDNN: AVX-512 or AMX). Where the CPU has none, encode()
// runs fp32 and says so: the embeddings are fp32's bit for bit.
TEST(Encoder, Bf16RunsWhereSupportedAndFp32Elsewhere) {
  const VitModel model = VitModel::load(fixture("clip"));
  const SafetensorsFile f = SafetensorsFile::open(fixture("clip", "cases.safetensors"));
  const std::vector<Case> cases = load_cases(f);
  const Case& c = cases.front();
  Executor exec({.threads = 2});
  EncodeParams p{.image_width = c.width, .image_height = c.height};
  const Encoding a = encode(model, c.patches, c.positions, p, exec);
  EXPECT_EQ(a.precision, Precision::fp32);
  p.precision = Precision::bf16;
  const Encoding b = encode(model, c.patches, c.positions, p, exec);
  EXPECT_EQ(b.precision, runnable_precision(Precision::bf16));
  EXPECT_EQ(runnable_precision(Precision::fp32), Precision::fp32);
  if (bf16_supported()) {
    EXPECT_EQ(b.precision, Precision::bf16);
    EXPECT_FALSE(std::memcmp(a.embeddings.data<float>(), b.embeddings.data<float>(), a.embeddings.size_bytes()) == 0)
        << "bf16 gave fp32's bits";
  } else {
    EXPECT_EQ(b.precision, Precision::fp32);
    EXPECT_EQ(std::memcmp(a.embeddings.data<float>(), b.embeddings.data<float>(), a.embeddings.size_bytes()), 0);
  }
  const auto meta = encoder_metadata(model, Precision::bf16);
  EXPECT_EQ(meta.at("precision"), std::string(to_string(b.precision)));
  EXPECT_EQ(meta.count("precision_requested"), bf16_supported() ? 0u : 1u);
}

// `encode --json` says which matrix kernels ran: fovea's AMX ones for bf16 where the CPU has
// them (amx_kernels_enabled()), its AVX2 one for fp32 where oneDNN has no f32 brgemm
// (avx2_kernels_enabled()); FOVEA_AMX=0 keeps bf16 on oneDNN, FOVEA_AVX2=0 fp32, and the
// embeddings are then oneDNN's (close to fovea's kernels', not the same bits).
TEST(EncodeCli, JsonSaysWhichKernelsRan) {
  const std::string dir = test::temp_dir("enc_cli_kernels");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 48, 3), image);
  auto run = [&](const std::string& prec, const std::string& out) {
    const auto r = test::run_cli({"encode", image, "--model", fixture("clip"), "--budget", "20", "--precision", prec,
                                  "-o", dir + "/" + out, "--json", "--threads", "2"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["encoder"]["kernels"].get<std::string>() : "";
  };
  // Sets `var` to "0" for one run (restoring it after).
  auto without = [&](const char* var, const std::string& prec, const std::string& out) {
    const char* saved = std::getenv(var);
    const std::string saved_value = saved ? saved : "";
    ::setenv(var, "0", 1);
    const std::string k = run(prec, out);
    if (saved) ::setenv(var, saved_value.c_str(), 1);
    else ::unsetenv(var);
    return k;
  };
  EXPECT_EQ(run("fp32", "a.safetensors"), encoder_detail::avx2_kernels_enabled() ? "avx2+onednn" : "onednn");
  EXPECT_EQ(without("FOVEA_AVX2", "fp32", "d.safetensors"), "onednn");
  if (encoder_detail::avx2_kernels_enabled()) {  // fp32 on two kernels: close, not equal
    const SafetensorsFile a = SafetensorsFile::open(dir + "/a.safetensors"), d = SafetensorsFile::open(dir + "/d.safetensors");
    const Tensor x = a.load_f32(*a.find("embeddings")), y = d.load_f32(*d.find("embeddings"));
    ASSERT_EQ(x.shape(), y.shape());
    EXPECT_GE(mean_row_cosine(x, y), 0.99999);
  }
  const bool bf16 = bf16_supported();
  // Without fovea's AMX kernels, a CPU with AMX has AVX512-BF16 too: attention runs on that kernel.
  const char* bf16_without_amx = encoder_detail::avx512bf16::usable() ? "avx512bf16+onednn" : "onednn";
  EXPECT_EQ(run("bf16", "b.safetensors"), !bf16                  ? run("fp32", "e.safetensors")
                                          : encoder_detail::amx_kernels_enabled() ? "amx+onednn"
                                                                  : bf16_without_amx);
  EXPECT_EQ(without("FOVEA_AMX", "bf16", "c.safetensors"), bf16 ? bf16_without_amx : run("fp32", "f.safetensors"));
  if (bf16 && encoder_detail::avx512bf16_kernels_enabled()) {  // attention on fovea's kernel and on oneDNN's: close, not equal
    EXPECT_EQ(without("FOVEA_AVX512BF16", "bf16", "g.safetensors"), "onednn");
    const SafetensorsFile b = SafetensorsFile::open(dir + "/b.safetensors"), g = SafetensorsFile::open(dir + "/g.safetensors");
    const Tensor x = b.load_f32(*b.find("embeddings")), y = g.load_f32(*g.find("embeddings"));
    ASSERT_EQ(x.shape(), y.shape());
    EXPECT_GE(mean_row_cosine(x, y), 0.999);
  }
  if (bf16 && encoder_detail::amx_kernels_enabled()) {  // both ran bf16, on different kernels: close, not equal
    const SafetensorsFile b = SafetensorsFile::open(dir + "/b.safetensors"), c = SafetensorsFile::open(dir + "/c.safetensors");
    const Tensor x = b.load_f32(*b.find("embeddings")), y = c.load_f32(*c.find("embeddings"));
    ASSERT_EQ(x.shape(), y.shape());
    EXPECT_GE(mean_row_cosine(x, y), 0.999);
  }
}

// The CLI on a CPU without bf16 kernels (forced with ONEDNN_MAX_CPU_ISA=AVX2, which caps oneDNN
// on any x86 machine): one warning line, and the report and the file say fp32 ran for bf16.
TEST(EncodeCli, Bf16WithoutBf16KernelsRunsFp32AndSaysSo) {
  const std::string dir = test::temp_dir("enc_cli_bf16_avx2");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 48, 3), image);
  test::RunResult r, r32;
  {
    const test::ScopedEnv cap("ONEDNN_MAX_CPU_ISA", "AVX2");
    r = test::run_cli({"encode", image, "--model", fixture("clip"), "--budget", "20", "--precision", "bf16", "-o",
                       dir + "/e.safetensors", "--json", "--threads", "2"});
    // The same flags with fp32, under the same cap, write the same embeddings. (Uncapped, an
    // AVX-512 machine runs fp32 on other kernels, whose rounding differs.)
    r32 = test::run_cli({"encode", image, "--model", fixture("clip"), "--budget", "20", "-o", dir + "/f.safetensors",
                         "--threads", "2"});
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("fovea: warning: --precision bf16: this CPU has no native bf16 matrix kernels"), std::string::npos)
      << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["encoder"]["precision"], "fp32");
  EXPECT_EQ(j["encoder"]["precision_requested"], "bf16");
  // The capped ISA keeps fovea's AMX kernels off too; fp32 runs as on an AVX2 CPU: on fovea's
  // AVX2 kernel (the CPU has AVX2 and FMA: any CPU the cap applies to).
  EXPECT_EQ(j["encoder"]["kernels"], encoder_detail::avx2::usable() ? "avx2+onednn" : "onednn");
  const SafetensorsFile f = SafetensorsFile::open(dir + "/e.safetensors");
  EXPECT_EQ(f.metadata().at("precision"), "fp32");
  EXPECT_EQ(f.metadata().at("precision_requested"), "bf16");
  ASSERT_EQ(r32.exit_code, 0) << r32.err;
  const SafetensorsFile g = SafetensorsFile::open(dir + "/f.safetensors");
  const auto x = f.data(*f.find("embeddings")), y = g.data(*g.find("embeddings"));
  EXPECT_TRUE(x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin()));
  EXPECT_EQ(g.metadata().count("precision_requested"), 0u);
}

// bf16_supported() says yes exactly where the CPU (and the OS) offer native bf16 dot products,
// read here from CPUID apart from oneDNN: AVX512_BF16 (every AMX-BF16 CPU has it too) with the
// ZMM state enabled. So a bf16 machine whose check wrongly says no fails here instead of
// skipping its bf16 tests, and an emulating one (Ice Lake) that says yes fails too.
TEST(EncoderPrecision, Bf16SupportedExactlyWhereTheCpuHasNativeBf16) {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (cap && *cap) GTEST_SKIP() << "ONEDNN_MAX_CPU_ISA=" << cap << " caps what oneDNN may use";
  bool native = false;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool osxsave = __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1);
  const bool avx512f = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 16 & 1);
  const unsigned max_sub = a;
  const bool avx512_bf16 = avx512f && max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
  if (osxsave && avx512_bf16) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const unsigned need = (1u << 1) | (1u << 2) | (7u << 5);  // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
    native = (lo & need) == need;
  }
#endif
  EXPECT_EQ(bf16_supported(), native);
}

// Plain AVX-512 (Skylake-SP to Ice Lake) has only oneDNN's emulated bf16 matmul (gemm:jit,
// several times slower than fp32): bf16 runs fp32 there as well. ONEDNN_MAX_CPU_ISA=AVX512_CORE
// makes any AVX-512 BF16 or AMX machine such a CPU (and changes nothing below it).
TEST(EncodeCli, Bf16OnAvx512WithoutNativeBf16RunsFp32) {
  const std::string dir = test::temp_dir("enc_cli_bf16_avx512");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 48, 3), image);
  test::RunResult r;
  {
    const test::ScopedEnv cap("ONEDNN_MAX_CPU_ISA", "AVX512_CORE");
    r = test::run_cli({"encode", image, "--model", fixture("clip"), "--budget", "20", "--precision", "bf16", "-o",
                       dir + "/e.safetensors", "--json", "--threads", "2"});
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("fovea: warning: --precision bf16: this CPU has no native bf16 matrix kernels"),
            std::string::npos)
      << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["encoder"]["precision"], "fp32");
  EXPECT_EQ(j["encoder"]["precision_requested"], "bf16");
}

TEST(EncodeCli, TokenizeTakesAQueryEmbedding) {
  const std::string dir = test::temp_dir("enc_cli_query");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 48, 3), image);
  Tensor q(DType::f32, {1, 32});
  for (int i = 0; i < 32; ++i) q.data<float>()[i] = std::sin(float(i));
  save_safetensors(dir + "/q.safetensors", {{"query", &q}});
  const auto r = test::run_cli({"tokenize", image, "--query-embedding", dir + "/q.safetensors", "--model", fixture("clip"),
                                "--budget", "16", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("embedding(32)"), std::string::npos) << r.out;
  // The tokens follow the model's preprocessing (SigLIP's 0.5/0.5 from its preprocessor_config.json).
  const auto s = test::run_cli({"tokenize", image, "--query-embedding", dir + "/q.safetensors", "--model",
                                fixture("siglip"), "--budget", "16", "-o", dir + "/t.safetensors"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const SafetensorsFile t = SafetensorsFile::open(dir + "/t.safetensors");
  EXPECT_EQ(t.metadata().at("norm_mean"), "0.5,0.5,0.5");
  EXPECT_EQ(t.metadata().at("norm_std"), "0.5,0.5,0.5");
  EXPECT_EQ(t.metadata().at("preprocessing_source"), "model: preprocessor_config.json");
  expect_one_line_error(test::run_cli({"tokenize", image, "--query-embedding", dir + "/q.safetensors"}), 2, "--model");
  expect_one_line_error(test::run_cli({"tokenize", image, "--query-embedding", dir + "/q.safetensors", "--model",
                                       "random:vit-tiny"}), 2, "64");
  expect_one_line_error(test::run_cli({"tokenize", image, "--query-embedding", dir + "/none.npy", "--model", fixture("clip")}),
                        1, "none.npy");
}

}  // namespace
}  // namespace fovea
