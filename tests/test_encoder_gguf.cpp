// The llama.cpp mmproj loader (src/encoder/loaders/gguf_mmproj.cpp) and hostile GGUF files
// through `fovea encode`: the loader names what it does not support or find, the CLI prints
// one line and exits 1. Needs the encoder (left out of builds without it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/gguf.hpp"
#include "gguf_build.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

namespace fs = std::filesystem;
using namespace test;

std::string fixture(const std::string& dir, const std::string& file = "mmproj.gguf") {
  return test::source_dir() + "/tests/data/encoder/" + dir + "/" + file;
}

// ---- the mmproj loader ---------------------------------------------------------------------------

void expect_load_error(const std::string& path, Errc code, const std::vector<std::string>& fragments) {
  try {
    VitModel::load(path);
    ADD_FAILURE() << "loaded " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << f << " not in: " << e.what();
  }
}

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

TEST(GgufMmproj, LoadsTheLlavaLayoutAndItsContract) {
  const VitModel m = VitModel::load(fixture("gguf_llava"));
  const VitConfig& c = m.config();
  EXPECT_EQ(c.naming, "gguf_mmproj");
  EXPECT_EQ(c.family, VitFamily::clip);
  EXPECT_TRUE(c.class_token);
  EXPECT_TRUE(c.pre_norm);
  EXPECT_EQ(c.final_norm, FinalNorm::none);  // the converter leaves post_layernorm out
  EXPECT_EQ(c.layers, 2);                     // every stored block: HF's hidden_states[-2]
  EXPECT_EQ(c.projector, ProjectorType::mlp);
  EXPECT_EQ(c.projector_hidden, 48);
  EXPECT_EQ(c.projector_dim, 40);
  EXPECT_EQ(c.act, Activation::quick_gelu);
  EXPECT_EQ(c.input.source, "GGUF clip.vision.image_mean / image_std");
  EXPECT_FLOAT_EQ(c.input.mean[0], 0.48145466f);
  EXPECT_FLOAT_EQ(c.input.std[2], 0.27577711f);
  EXPECT_NE(embedding_output(c).find("projector"), std::string::npos);
  const VitModel s = VitModel::load(fixture("gguf_siglip"));
  EXPECT_EQ(s.config().family, VitFamily::siglip);
  EXPECT_FALSE(s.config().class_token);
  EXPECT_TRUE(s.config().patch_bias);
  EXPECT_EQ(s.config().final_norm, FinalNorm::all_tokens);
  EXPECT_EQ(s.config().act, Activation::gelu_tanh);
  EXPECT_EQ(s.config().projector, ProjectorType::none);
  EXPECT_FLOAT_EQ(s.config().input.mean[1], 0.5f);
}

TEST(GgufMmproj, FeatureLayerSelectsTheBlocksRun) {
  const std::string dir = test::temp_dir("gguf_feature");
  GgufBuild g = GgufBuild::from(GgufFile::open(fixture("gguf_llava")));
  g.set("clip.vision.feature_layer", array(GgufType::i32, {int64_t(1)}));
  write_file(dir + "/one.gguf", g.bytes());
  const VitModel m = VitModel::load(dir + "/one.gguf");
  EXPECT_EQ(m.config().layers, 1);
  EXPECT_EQ(m.config().layers_in_checkpoint, 2);
  g.set("clip.vision.feature_layer", array(GgufType::i32, {int64_t(1), int64_t(2)}));
  write_file(dir + "/two.gguf", g.bytes());
  expect_load_error(dir + "/two.gguf", Errc::unsupported, {"feature_layer lists 2 layers"});
  g.set("clip.vision.feature_layer", array(GgufType::i32, {int64_t(7)}));
  write_file(dir + "/seven.gguf", g.bytes());
  expect_load_error(dir + "/seven.gguf", Errc::corrupt_data, {"feature_layer 7"});
}

// Gemma 3's and SmolVLM's (idefics3) mmproj files: their projectors group a uniform grid of
// tokens, so the SigLIP tower runs alone (the same numbers as the tower without a projector, on
// the native grid), the projector tensors are counted as ignored and embedding_output() says so;
// idefics3's positions are bucketized.
TEST(GgufMmproj, GridProjectorsRunTheTowerAlone) {
  const std::string dir = test::temp_dir("gguf_grid_projectors");
  const VitModel plain = VitModel::load(fixture("gguf_siglip"));
  const SafetensorsFile f = SafetensorsFile::open(fixture("gguf_siglip", "cases.safetensors"));
  ASSERT_TRUE(f.find("raw.patches") && f.find("raw.positions"));
  const Tensor patches = f.load(*f.find("raw.patches")), positions = f.load(*f.find("raw.positions"));  // the native grid
  Executor exec({.threads = 2});
  const EncodeParams p{.image_width = plain.config().native_px(), .image_height = plain.config().native_px()};
  const Encoding want = encode(plain, patches, positions, p, exec);
  for (const char* type : {"gemma3", "idefics3"}) {
    SCOPED_TRACE(type);
    GgufBuild g = GgufBuild::from(GgufFile::open(fixture("gguf_siglip")));
    g.set("clip.projector_type", scalar(GgufType::string, std::string(type)));
    g.tensors.push_back({"mm.input_projection.weight", {32, 16}, 0, std::vector<uint8_t>(32 * 16 * 4, 0), {}});
    const std::string path = dir + "/" + type + ".gguf";
    write_file(path, g.bytes());
    const VitModel m = VitModel::load(path);
    EXPECT_EQ(m.config().projector, ProjectorType::none);
    EXPECT_EQ(m.tensors_ignored(), 1);
    EXPECT_NE(embedding_output(m.config()).find(std::string("llama.cpp's ") + type + " projector"), std::string::npos)
        << embedding_output(m.config());
    EXPECT_EQ(m.config().pos_sampling,
              std::string(type) == "idefics3" ? PositionSampling::bucketized : PositionSampling::bicubic);
    const Encoding e = encode(m, patches, positions, p, exec);
    ASSERT_EQ(e.embeddings.numel(), want.embeddings.numel());
    double diff = 0;  // the native grid: every sampling reads the table itself
    for (int64_t i = 0; i < e.embeddings.numel(); ++i)
      diff = std::max(diff, double(std::fabs(e.embeddings.data<float>()[i] - want.embeddings.data<float>()[i])));
    EXPECT_LE(diff, 1e-5);
  }
}

TEST(GgufMmproj, NamesWhatItDoesNotSupportOrFind) {
  const std::string dir = test::temp_dir("gguf_loader_errors");
  const GgufBuild base = GgufBuild::from(GgufFile::open(fixture("gguf_llava")));
  GgufBuild g = base;
  g.set("clip.projector_type", scalar(GgufType::string, std::string("ldp")));
  write_file(dir + "/ldp.gguf", g.bytes());
  expect_load_error(dir + "/ldp.gguf", Errc::unsupported, {"projector type 'ldp' is not supported", "'mlp'", "resampler"});

  g = base;
  std::erase_if(g.tensors, [](const GgufBuild::T& t) { return t.name == "v.blk.1.ln2.bias" || t.name == "mm.2.bias"; });
  write_file(dir + "/missing.gguf", g.bytes());
  expect_load_error(dir + "/missing.gguf", Errc::corrupt_data, {"missing 2 tensor(s)", "v.blk.1.ln2.bias [32]", "mm.2.bias [40]"});

  g = base;
  GgufBuild::T* q = g.tensor("v.blk.0.attn_q.weight");
  q->type = 12;  // Q4_K, a valid ggml type; its 256-element rows cannot be a 32x32 matrix
  q->ne = {256, 4};
  q->data.assign(4 * 144, 0);
  write_file(dir + "/q4k.gguf", g.bytes());
  expect_load_error(dir + "/q4k.gguf", Errc::corrupt_data, {"v.blk.0.attn_q.weight has shape [4, 256], expected [32, 32]"});
  q->type = 26;  // I32: right shape, a type fovea does not decode
  q->ne = {32, 32};
  q->data.assign(32 * 32 * 4, 0);
  write_file(dir + "/i32.gguf", g.bytes());
  expect_load_error(dir + "/i32.gguf", Errc::unsupported, {"unsupported GGUF tensor type I32 in v.blk.0.attn_q.weight"});

  // A hostile width backed by a small patch embedding: a clear error naming the mismatched
  // tensors, not a 50 GB allocation for the stacked attention matrices.
  g = base;
  g.set("clip.vision.embedding_length", scalar(GgufType::u32, uint64_t(65536)));
  g.set("clip.vision.patch_size", scalar(GgufType::u32, uint64_t(1)));
  g.set("clip.vision.image_size", scalar(GgufType::u32, uint64_t(4)));
  GgufBuild::T* pe = g.tensor("v.patch_embd.weight");
  pe->type = 0;
  pe->ne = {1, 1, 3, 65536};
  pe->data.assign(65536 * 3 * 4, 0);
  write_file(dir + "/wide.gguf", g.bytes());
  expect_load_error(dir + "/wide.gguf", Errc::corrupt_data, {"v.position_embd.weight has shape", "v.blk.0.attn_q.weight has shape"});

  g = base;
  g.set("general.architecture", scalar(GgufType::string, std::string("llama")));
  write_file(dir + "/llm.gguf", g.bytes());
  expect_load_error(dir + "/llm.gguf", Errc::unsupported, {"architecture 'llama'", "mmproj"});

  g = base;
  g.erase_kv("clip.vision.image_mean");
  write_file(dir + "/nomean.gguf", g.bytes());
  expect_load_error(dir + "/nomean.gguf", Errc::corrupt_data, {"clip.vision.image_mean"});

  g = base;
  g.set("clip.vision.embedding_length", scalar(GgufType::u32, uint64_t(48)));
  write_file(dir + "/width.gguf", g.bytes());
  expect_load_error(dir + "/width.gguf", Errc::corrupt_data, {"v.patch_embd.weight has shape [32, 3, 8, 8]"});
}

// Edits a hostile-edit sweep (tests/sweeps/gguf_model_sweep.py) found loaded as a silently different
// model, refused only at encode time as if the user's --patch were wrong, or quoted raw.
TEST(GgufMmproj, RefusesFilesItWouldMisreadAndQuotesThemSafely) {
  const std::string dir = test::temp_dir("gguf_misread");
  const GgufBuild base = GgufBuild::from(GgufFile::open(fixture("gguf_llava")));
  int n = 0;
  auto check = [&](const GgufBuild& g, Errc code, const std::vector<std::string>& fragments) {
    const std::string path = dir + "/" + std::to_string(n++) + ".gguf";
    write_file(path, g.bytes());
    expect_load_error(path, code, fragments);
    return path;
  };
  auto without = [&](std::initializer_list<const char*> names) {
    GgufBuild g = base;
    for (const char* name : names) std::erase_if(g.tensors, [&](const GgufBuild::T& t) { return t.name == name; });
    return g;
  };
  GgufBuild g = base;
  g.set("clip.vision.block_count", scalar(GgufType::u32, uint64_t(0)));  // was: no block run
  check(g, Errc::corrupt_data, {"clip.vision.block_count = 0 is out of range [1, 4096]"});
  g.set("clip.vision.block_count", scalar(GgufType::boolean, true));  // was: one block
  check(g, Errc::corrupt_data, {"clip.vision.block_count is a BOOL"});
  // A head count that does not divide the width: named by its key (one that divides it is another
  // valid model: the tensors do not fix the head count).
  g = base;
  g.set("clip.vision.attention.head_count", scalar(GgufType::u32, uint64_t(3)));
  check(g, Errc::corrupt_data, {"clip.vision.attention.head_count = 3 does not divide clip.vision.embedding_length"});
  // A norm's or the projector's second layer's bias without its weight (was: the norm or the
  // layer silently left out).
  check(without({"v.pre_ln.weight"}), Errc::corrupt_data, {"missing 1 tensor(s): v.pre_ln.weight [32]"});
  check(without({"mm.2.weight"}), Errc::corrupt_data, {"missing 1 tensor(s): mm.2.weight [40, "});
  check(without({"mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias"}), Errc::corrupt_data,
        {"no mm.0.weight or mm.0.bias"});
  g = base;
  g.set("clip.vision.image_mean", array(GgufType::f32, {std::nan(""), 0.5, 0.5}));
  check(g, Errc::corrupt_data, {"clip.vision.image_mean values must be finite"});
  // A finite mean whose ratio to the std is not (was: accepted by `fovea model`, refused at encode).
  g.set("clip.vision.image_mean", array(GgufType::f32, {3e38, 0.5, 0.5}));
  g.set("clip.vision.image_std", array(GgufType::f32, {0.25, 0.5, 0.5}));
  check(g, Errc::corrupt_data, {"mean/std ratio beyond float range"});
  // Four input channels (was: accepted by `fovea model`, then exit 2 and "use --patch 8" at encode).
  g = base;
  GgufBuild::T* pe = g.tensor("v.patch_embd.weight");
  pe->type = 0;
  pe->ne = {8, 8, 4, 32};
  pe->data.assign(8 * 8 * 4 * 32 * 4, 0);
  check(g, Errc::unsupported, {"the model takes 4-channel patches"});
  pe->ne = {8, 8, 0, 32};  // an empty tensor (was: read, and a projector of width 0 taken as absent)
  pe->data.clear();
  check(g, Errc::corrupt_data, {"v.patch_embd.weight's dimension 2 is 0"});
  // One stray block far beyond block_count (was: "2 of 1000000 blocks").
  g = base;
  g.tensors.push_back({"v.blk.999999.ln1.weight", {32}, 0, std::vector<uint8_t>(128, 0), std::nullopt});
  check(g, Errc::limit_exceeded, {"v.blk.999999.ln1.weight is layer 999999"});

  // What the file says is quoted printable and bounded: an ESC (a terminal escape sequence), a
  // NUL (which cut the message short) and a 1 MiB name.
  g = base;
  g.set("clip.projector_type", scalar(GgufType::string, std::string("a\x1b[31mred\0x", 11)));
  const std::string esc = check(g, Errc::unsupported, {"projector type 'a\\x1b[31mred\\x00x' is not supported"});
  const test::RunResult r = test::run_cli({"model", esc});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\\x1b[31mred\\x00x' is not supported"), std::string::npos) << r.err;
  g.set("clip.projector_type", scalar(GgufType::string, std::string(1 << 20, 'p')));
  try {
    VitModel::load(check(g, Errc::unsupported, {"projector type 'pppp", "... (1048576 bytes)' is not supported"}));
  } catch (const Error& e) {
    EXPECT_LE(std::string(e.what()).size(), 4096u + 40u);
  }
}

// The CLI: every hostile file is one "fovea: error:" line and exit 1, and no output file.
TEST(GgufCli, HostileFilesExitOneWithOneLine) {
  const std::string dir = test::temp_dir("gguf_cli");
  const std::string image = fixture("gguf_llava", "image.png");
  std::vector<Hostile> files = hostile_files();
  const std::vector<uint8_t> real = [&] {
    std::ifstream in(fixture("gguf_llava"), std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }();
  files.push_back({"truncated_real", std::vector<uint8_t>(real.begin(), real.begin() + real.size() / 2), Errc::corrupt_data,
                   "runs past the end"});
  files.push_back({"header_only", std::vector<uint8_t>(real.begin(), real.begin() + 16), Errc::corrupt_data, "key/value count"});
  for (const Hostile& h : files) {
    const std::string path = dir + "/" + h.name + ".gguf";
    write_file(path, h.bytes);
    const test::RunResult r = test::run_cli({"encode", image, "--uniform", "--model", path, "-o", dir + "/o.safetensors"});
    EXPECT_EQ(r.exit_code, 1) << h.name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << h.name << ": " << r.err;
    EXPECT_EQ(r.err.rfind("fovea: error: ", 0), 0u) << h.name << ": " << r.err;
    EXPECT_NE(r.err.find(h.fragment), std::string::npos) << h.name << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists(dir + "/o.safetensors"));
}

}  // namespace
}  // namespace fovea
