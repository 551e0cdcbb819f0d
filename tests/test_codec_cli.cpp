// fovea compress / decompress / compress --report: round trips, codebook
// references, the sibling merge, and bad input (one line, exit 1, no file left behind).
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "fovea/compress.hpp"
#include "fovea/safetensors.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

namespace fs = std::filesystem;

// An embeddings file as fovea encode writes it: a quadtree of tokens on a 16-px grid (level 0
// everywhere, 2 columns of level-1 tokens on the right), embeddings of rank 6 plus noise.
std::string write_embeddings(const std::string& path, int64_t grid, int64_t d, uint32_t seed,
                             const std::string& model = "test-model", bool identical = false) {
  std::vector<float> pos;
  for (int64_t y = 0; y < grid; ++y)
    for (int64_t x = 0; x < grid; ++x) pos.insert(pos.end(), {float(x) * 16 + 8, float(y) * 16 + 8, 16.f, 0.f});
  const int64_t n = int64_t(pos.size() / 4);
  Tensor p(DType::f32, {n, 4}), l(DType::i32, {n}), e(DType::f32, {n, d});
  std::memcpy(p.bytes(), pos.data(), pos.size() * 4);
  std::mt19937 rng(seed), basis_rng(99);
  std::normal_distribution<float> g;
  std::vector<float> basis(size_t(6 * d));
  for (float& v : basis) v = g(basis_rng);
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < 6; ++r) {
      const float c = identical ? float(r + 1) : g(rng) * 2 / float(r + 1);
      for (int64_t k = 0; k < d; ++k) e.data<float>()[i * d + k] += c * basis[size_t(r * d + k)];
    }
    if (!identical)
      for (int64_t k = 0; k < d; ++k) e.data<float>()[i * d + k] += 0.2f * g(rng);
  }
  save_safetensors(path, {{"embeddings", &e}, {"positions", &p}, {"levels", &l}},
                   {{"format", "fovea.embeddings"}, {"model", model}});
  return path;
}

void expect_one_error_line(const test::RunResult& r, int code, const std::string& has) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(r.err.rfind("fovea: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(has), std::string::npos) << r.err;
}

TEST(CodecCli, Fp16RoundTripKeepsPositionsAndLevels) {
  const std::string dir = test::temp_dir("codec_cli_fp16");
  const std::string emb = write_embeddings(dir + "/emb.safetensors", 8, 40, 1);
  auto r = test::run_cli({"compress", emb, "--codec", "fp16", "-o", dir + "/c.safetensors", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["bytes_per_token"], 80);
  EXPECT_DOUBLE_EQ(j["ratio_vs_fp32"].get<double>(), 2.0);
  {
    const SafetensorsFile c = SafetensorsFile::open(dir + "/c.safetensors");
    EXPECT_EQ(c.find("embeddings"), nullptr);  // only records, positions and levels
    EXPECT_EQ(c.find("codes")->shape, (std::vector<int64_t>{64, 80}));
    EXPECT_EQ(c.metadata().at("codec"), "fp16");
    EXPECT_EQ(c.metadata().at("codebook_hash"), "");
  }
  r = test::run_cli({"decompress", dir + "/c.safetensors", "-o", dir + "/d.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile a = SafetensorsFile::open(emb), b = SafetensorsFile::open(dir + "/d.safetensors");
  const Tensor x = a.load(*a.find("embeddings")), y = b.load(*b.find("embeddings"));
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(y.data<float>()[i], f16_to_f32(f32_to_f16(x.data<float>()[i])));
  for (const char* name : {"positions", "levels"}) {
    const auto sa = a.data(*a.find(name)), sb = b.data(*b.find(name));
    ASSERT_EQ(sa.size(), sb.size());
    EXPECT_EQ(0, std::memcmp(sa.data(), sb.data(), sa.size())) << name;
  }
}

TEST(CodecCli, TrainedCodecsReferToTheirCodebook) {
  const std::string dir = test::temp_dir("codec_cli_int8");
  const std::string train = write_embeddings(dir + "/train.safetensors", 20, 32, 2);  // 400 vectors
  const std::string emb = write_embeddings(dir + "/emb.safetensors", 8, 32, 3);
  for (const char* spec : {"int8", "pq:8"}) {
    SCOPED_TRACE(spec);
    const std::string cb = dir + "/" + std::string(spec[0] == 'i' ? "int8" : "pq") + ".cb.safetensors";
    auto r = test::run_cli({"compress", emb, "--codec", spec, "--train", train, "--codebook", cb, "-o", dir + "/c1.safetensors"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // The saved codebook alone gives the same codes.
    r = test::run_cli({"compress", emb, "--codebook", cb, "-o", dir + "/c2.safetensors"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const SafetensorsFile c1 = SafetensorsFile::open(dir + "/c1.safetensors"), c2 = SafetensorsFile::open(dir + "/c2.safetensors");
    const auto s1 = c1.data(*c1.find("codes")), s2 = c2.data(*c2.find("codes"));
    ASSERT_EQ(s1.size(), s2.size());
    EXPECT_EQ(0, std::memcmp(s1.data(), s2.data(), s1.size()));
    EXPECT_EQ(c1.metadata().at("codebook_hash"), load_codebook(cb)->state_hash());
    r = test::run_cli({"decompress", dir + "/c1.safetensors", "--codebook", cb, "-o", dir + "/d.safetensors", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Without it: a clear bad-argument error.
    r = test::run_cli({"decompress", dir + "/c1.safetensors", "-o", dir + "/x.safetensors"});
    expect_one_error_line(r, 2, "give its --codebook");
    EXPECT_FALSE(fs::exists(dir + "/x.safetensors"));
  }
  // A codebook trained on other data does not decode this file.
  const std::string other = write_embeddings(dir + "/other.safetensors", 10, 32, 4);
  auto r = test::run_cli({"compress", other, "--codec", "int8", "--train", other, "--codebook", dir + "/other.cb.safetensors",
                          "-o", dir + "/o.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_cli({"compress", emb, "--codebook", dir + "/int8.cb.safetensors", "-o", dir + "/c.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_cli({"decompress", dir + "/c.safetensors", "--codebook", dir + "/other.cb.safetensors", "-o", dir + "/x.safetensors"});
  expect_one_error_line(r, 1, "is not the codebook");
  EXPECT_FALSE(fs::exists(dir + "/x.safetensors"));
}

// A faiss: codebook is FAISS's serialised index, which faiss::read_index parses without checking
// it against crafted files (a mutated IVF,PQ codebook crashed it in read_ivfpq, a mutated LSH one
// asked for 11 GB). Without --trust-faiss-codebook neither compress nor decompress hands a byte
// of it to FAISS; with it, the round trip works as before.
TEST(CodecCli, FaissCodebooksAreLoadedOnlyWhenTrusted) {
  const std::string dir = test::temp_dir("codec_cli_faiss_trust");
  const std::string train = write_embeddings(dir + "/train.safetensors", 20, 32, 2);
  const std::string emb = write_embeddings(dir + "/emb.safetensors", 8, 32, 3);
  const std::string cb = dir + "/faiss.cb.safetensors", c = dir + "/c.safetensors", out = dir + "/out.safetensors";
  auto r = test::run_cli({"compress", emb, "--codec", "faiss:PCA16,SQ8", "--train", train, "--codebook", cb, "-o", c});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_cli({"compress", emb, "--codebook", cb, "-o", out});
  expect_one_error_line(r, 1, "--trust-faiss-codebook");
  EXPECT_FALSE(fs::exists(out));
  r = test::run_cli({"decompress", c, "--codebook", cb, "-o", out});
  expect_one_error_line(r, 1, "--trust-faiss-codebook");
  EXPECT_FALSE(fs::exists(out));
  r = test::run_cli({"compress", emb, "--codebook", cb, "--trust-faiss-codebook", "-o", dir + "/c2.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_cli({"decompress", c, "--codebook", cb, "--trust-faiss-codebook", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile d = SafetensorsFile::open(out);
  EXPECT_EQ(d.find("embeddings")->shape, (std::vector<int64_t>{64, 32}));

  // A codebook whose index bytes FAISS would choke on is refused by the same check, unread:
  // its message is the consent one, not FAISS's parse error.
  {
    const SafetensorsFile f = SafetensorsFile::open(cb);
    Tensor junk(DType::u8, {64});
    for (int64_t i = 0; i < 64; ++i) junk.data<uint8_t>()[i] = uint8_t(0xff - i);
    save_safetensors(dir + "/junk.cb.safetensors", {{"faiss.index", &junk}}, f.metadata());
  }
  r = test::run_cli({"decompress", c, "--codebook", dir + "/junk.cb.safetensors", "-o", out + "2"});
  expect_one_error_line(r, 1, "--trust-faiss-codebook");
  try {
    load_codebook(dir + "/junk.cb.safetensors");
    ADD_FAILURE() << "an untrusted faiss codebook loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::unsupported);
    EXPECT_EQ(std::string(e.what()).find("does not load"), std::string::npos) << e.what();
  }
  // Trusted, the same junk reaches FAISS, which here throws (a crafted file could do worse).
  try {
    load_codebook(dir + "/junk.cb.safetensors", nullptr, {.trust_faiss = true});
    ADD_FAILURE() << "junk loaded as a FAISS index";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::corrupt_data);
    EXPECT_NE(std::string(e.what()).find("does not load"), std::string::npos) << e.what();
  }
}

// A codebook whose metadata claims a huge D (pq:1 at D = 2^20, the largest make_codec takes)
// with a tiny tensor: refused for the tensor's shape before the 1 GiB of centroids the claim
// implies is allocated (the PQ codec used to allocate them when it was made).
TEST(CodecCli, AHugeClaimedCodebookIsRefusedBeforeAllocating) {
  const std::string dir = test::temp_dir("codec_cli_huge_cb");
  const std::string emb = write_embeddings(dir + "/emb.safetensors", 4, 32, 3);
  Tensor c(DType::f32, {1, 256, 1});
  save_safetensors(dir + "/huge.cb.safetensors", {{"pq.centroids", &c}},
                   {{"format", "fovea.codebook"}, {"codec", "pq:1"}, {"dim", "1048576"}, {"hash", "0"}});
  const auto r = test::run_cli({"compress", emb, "--codebook", dir + "/huge.cb.safetensors", "-o", dir + "/o.safetensors"});
  expect_one_error_line(r, 1, "'pq.centroids' must be F32 [1, 256, 1048576]");
  EXPECT_FALSE(fs::exists(dir + "/o.safetensors"));
  rusage ru{};  // the only child this test reaped is that CLI run
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &ru), 0);
  EXPECT_LT(ru.ru_maxrss, 512L << 10) << "KiB";
}

TEST(CodecCli, BadInputIsOneLineAndExitOne) {
  const std::string dir = test::temp_dir("codec_cli_bad");
  const std::string d32 = write_embeddings(dir + "/d32.safetensors", 20, 32, 5);
  const std::string d48 = write_embeddings(dir + "/d48.safetensors", 6, 48, 6);
  const std::string out = dir + "/out.safetensors";
  auto r = test::run_cli({"compress", d32, "--codec", "int8", "--train", d32, "--codebook", dir + "/cb.safetensors", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  fs::remove(out);
  // A codebook for another D.
  r = test::run_cli({"compress", d48, "--codebook", dir + "/cb.safetensors", "-o", out});
  expect_one_error_line(r, 1, "the codebook is for D = 32");
  // A codebook for another model.
  const std::string m2 = write_embeddings(dir + "/m2.safetensors", 6, 32, 7, "another-model");
  r = test::run_cli({"compress", m2, "--codebook", dir + "/cb.safetensors", "-o", out});
  expect_one_error_line(r, 1, "trained on model 'test-model'");
  // Too few training vectors for PQ (36 < 256).
  const std::string small = write_embeddings(dir + "/small.safetensors", 6, 32, 8);
  r = test::run_cli({"compress", d32, "--codec", "pq:8", "--train", small, "--codebook", dir + "/pq.safetensors", "-o", out});
  expect_one_error_line(r, 1, "needs at least 256 training vectors, got 36");
  EXPECT_FALSE(fs::exists(dir + "/pq.safetensors"));
  // Wrong dtype and shape of the embeddings.
  Tensor ints(DType::i32, {4, 8}), cube(DType::f32, {2, 3, 4});
  save_safetensors(dir + "/ints.safetensors", {{"embeddings", &ints}});
  save_safetensors(dir + "/cube.safetensors", {{"embeddings", &cube}});
  r = test::run_cli({"compress", dir + "/ints.safetensors", "--codec", "fp16", "-o", out});
  expect_one_error_line(r, 1, "'embeddings' must be F32, F16 or BF16, not I32");
  r = test::run_cli({"compress", dir + "/cube.safetensors", "--codec", "fp16", "-o", out});
  expect_one_error_line(r, 1, "'embeddings' must be [N, D]");
  // A truncated codes file.
  r = test::run_cli({"compress", d32, "--codec", "fp16", "-o", dir + "/c.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  fs::resize_file(dir + "/c.safetensors", fs::file_size(dir + "/c.safetensors") - 100);
  r = test::run_cli({"decompress", dir + "/c.safetensors", "-o", out});
  expect_one_error_line(r, 1, "c.safetensors");
  // No tokens at all: the report (whose figures are per token) says so; it divided by zero before.
  Tensor none(DType::f32, {0, 32});
  save_safetensors(dir + "/none.safetensors", {{"embeddings", &none}}, {{"format", "fovea.embeddings"}, {"model", "m"}});
  r = test::run_cli({"compress", "--report", dir + "/none.safetensors"});
  expect_one_error_line(r, 1, "holds no tokens");
  // An unknown codec is a bad argument (exit 2).
  r = test::run_cli({"compress", d32, "--codec", "zip", "-o", out});
  expect_one_error_line(r, 2, "unknown codec 'zip'");
  EXPECT_FALSE(fs::exists(out));
}

TEST(CodecCli, MergeReducesTokensAndSaysWhat) {
  const std::string dir = test::temp_dir("codec_cli_merge");
  // All tokens alike: the 8x8 level-0 grid collapses to one level-3 token.
  const std::string emb = write_embeddings(dir + "/same.safetensors", 8, 16, 9, "m", true);
  auto r = test::run_cli({"compress", emb, "--codec", "fp16", "--merge", "0.99", "-o", dir + "/m.safetensors", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["merge"]["tokens_in"], 64);
  EXPECT_EQ(j["merge"]["tokens_out"], 1);
  EXPECT_EQ(j["merge"]["groups"], 16 + 4 + 1);
  r = test::run_cli({"decompress", dir + "/m.safetensors", "-o", dir + "/d.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile d = SafetensorsFile::open(dir + "/d.safetensors");
  const Tensor pos = d.load(*d.find("positions"));
  ASSERT_EQ(pos.dim(0), 1);
  EXPECT_FLOAT_EQ(pos.data<float>()[0], 64.f);
  EXPECT_FLOAT_EQ(pos.data<float>()[2], 128.f);
  EXPECT_FLOAT_EQ(pos.data<float>()[3], 3.f);
  EXPECT_EQ(d.find("merge_parent")->shape, (std::vector<int64_t>{64}));
}

TEST(CodecCli, ReportTableJsonAndPlot) {
  const std::string dir = test::temp_dir("codec_cli_report");
  const std::string a = write_embeddings(dir + "/a.safetensors", 12, 48, 10);
  const std::string b = write_embeddings(dir + "/b.safetensors", 12, 48, 11);
  auto r = test::run_cli({"compress", "--report", a, b, "--codec", "int8", "--codec", "pca:8+int8", "--codec", "pq:6",
                          "--json", "--plot", dir + "/rd.png", "--reps", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], 288);
  ASSERT_EQ(j["rows"].size(), 4u);  // 3 codecs + the merge row
  EXPECT_EQ(j["rows"][0]["codec"], "int8");
  EXPECT_EQ(j["rows"][0]["bytes_per_token"], 48);
  EXPECT_GT(j["rows"][0]["mean_cosine"].get<double>(), 0.999);
  EXPECT_EQ(j["rows"][2]["bytes_per_token"], 6);
  EXPECT_LT(j["rows"][2]["mean_cosine"].get<double>(), j["rows"][0]["mean_cosine"].get<double>());
  EXPECT_EQ(j["rows"][3]["codec"], "merge:0.98");
  std::ifstream png(dir + "/rd.png", std::ios::binary);
  char sig[8] = {};
  png.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  // The text table names every codec and fp32.
  r = test::run_cli({"compress", "--report", a, "--codec", "fp16", "--reps", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fp32"), std::string::npos);
  EXPECT_NE(r.out.find("fp16"), std::string::npos);
}

}  // namespace
}  // namespace fovea
