// Token compression: codecs, codebooks, the sibling merge, distortion measures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "compress/compress_internal.hpp"
#include "fovea/compress.hpp"
#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

// Embedding-like vectors: a few strong shared directions (what a ViT's tokens have), per-token
// noise, and two outlier channels far larger than the rest (trained ViTs have those). The
// directions depend on D only, so calls with different seeds draw from one distribution.
Tensor synthetic_embeddings(int64_t n, int64_t d, uint32_t seed, int rank = 12) {
  std::mt19937 basis_rng(1234);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> basis(size_t(rank * d));
  for (float& v : basis) v = g(basis_rng);
  std::mt19937 rng(seed);
  Tensor x(DType::f32, {n, d});
  float* p = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < rank; ++r) {
      const float c = g(rng) * 3.f / float(1 + r);
      for (int64_t k = 0; k < d; ++k) p[i * d + k] += c * basis[size_t(r * d + k)];
    }
    for (int64_t k = 0; k < d; ++k) p[i * d + k] += 0.3f * g(rng);
    p[i * d + 0] += 40.f;
    if (d > 5) p[i * d + 5] -= 25.f + 3.f * g(rng);
  }
  return x;
}

double mean_cosine(const Tensor& a, const Tensor& b) { return measure_distortion(a, b).mean_cosine; }

TEST(Codec, SpecsParseAndReject) {
  EXPECT_EQ(make_codec("fp16", 768)->bytes_per_token(), 1536);
  EXPECT_EQ(make_codec("bf16", 768)->bytes_per_token(), 1536);
  EXPECT_EQ(make_codec("int8", 768)->bytes_per_token(), 768);
  EXPECT_EQ(make_codec("pca:128", 768)->bytes_per_token(), 256);
  EXPECT_EQ(make_codec("pca:128+int8", 768)->bytes_per_token(), 128);
  EXPECT_EQ(make_codec("pq:96", 768)->bytes_per_token(), 96);
  EXPECT_EQ(make_codec("opq:128", 768)->spec(), "opq:128");
  EXPECT_EQ(make_codec("pca:64+int8", 768)->spec(), "pca:64+int8");
  EXPECT_EQ(make_codec("faiss:PCA128,SQ8", 768)->bytes_per_token(), 128);
  for (const char* badspec : {"zip", "pq:", "pq:0", "pq:100", "pca:800", "pca:-1", "pca:12+int4", "opq:x", "faiss:Nonsense7"}) {
    try {
      make_codec(badspec, 768);
      ADD_FAILURE() << badspec << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument) << badspec;
    }
  }
  try {
    make_codec("pq:100", 768);
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "codec 'pq:100': 100 sub-quantizers do not divide D = 768");
  }
}

TEST(Codec, FloatCodecsMatchTheScalarConversions) {
  const Tensor x = synthetic_embeddings(37, 33, 1);  // odd D: records are 2 mod 4 bytes
  for (bool bf : {false, true}) {
    auto c = make_codec(bf ? "bf16" : "fp16", 33);
    const Tensor r = c->encode(x);
    ASSERT_EQ(r.dim(1), 66);
    const Tensor y = c->decode(r);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = x.data<float>()[i];
      const float want = bf ? bf16_to_f32(f32_to_bf16(v)) : f16_to_f32(f32_to_f16(v));
      ASSERT_EQ(y.data<float>()[i], want) << i;
    }
    ASSERT_TRUE(c->elementwise_decode().has_value());
  }
}

TEST(Codec, Int8KernelsMatchTheirReferences) {
  const int64_t n = 53, d = 131;
  Tensor x = synthetic_embeddings(n, d, 2);
  float* p = x.data<float>();
  p[3] = NAN;
  p[4] = INFINITY;
  p[200] = -INFINITY;
  p[300] = 1e30f;
  compress::AffineU8 q;
  q.calibrate(p, n, d);
  std::vector<uint8_t> a(size_t(n * d)), b(size_t(n * d));
  compress::u8_affine_encode(p, n, d, q.lo.data(), q.inv_step.data(), a.data());
  compress::u8_affine_encode_ref(p, n, d, q.lo.data(), q.inv_step.data(), b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[3], 0);    // NaN codes as the bottom of the range
  EXPECT_EQ(a[4], 255);  // +inf clamps to the top
  std::vector<float> ya(size_t(n * d)), yb(size_t(n * d));
  compress::u8_affine_decode(a.data(), n, d, q.lo.data(), q.step.data(), ya.data());
  compress::u8_affine_decode_ref(a.data(), n, d, q.lo.data(), q.step.data(), yb.data());
  EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * 4));
}

TEST(Codec, Int8ReachesTheCosineTargetOnHeldOutData) {
  const int64_t d = 768;
  auto c = make_codec("int8", d);
  EXPECT_TRUE(c->needs_training());
  EXPECT_FALSE(c->trained());
  c->train(synthetic_embeddings(2000, d, 3));
  const Tensor eval = synthetic_embeddings(500, d, 4);  // other tokens, same distribution
  const Distortion dist = measure_distortion(eval, c->decode(c->encode(eval)));
  EXPECT_GE(dist.mean_cosine, 0.999);
  EXPECT_GE(dist.min_cosine, 0.998);
  EXPECT_LE(c->bytes_per_token(), d + 8);
}

TEST(Codec, Int8OnTheEncoderFixtures) {
  // The tiny PyTorch-made ViTs of tests/data/encoder (random init, D = 32): their last hidden
  // states, all cases of a model together, trained and measured in-sample.
  for (const char* m : {"clip", "siglip", "torchvision"}) {
    const SafetensorsFile f = SafetensorsFile::open(test::source_dir() + "/tests/data/encoder/" + m + "/cases.safetensors");
    std::vector<float> rows;
    for (const auto& e : f.entries())
      if (e.name.ends_with(".last_hidden")) {
        const Tensor t = f.load_f32(e);
        rows.insert(rows.end(), t.data<float>(), t.data<float>() + t.numel());
      }
    Tensor x(DType::f32, {int64_t(rows.size() / 32), 32});
    std::memcpy(x.bytes(), rows.data(), rows.size() * 4);
    auto c = make_codec("int8", 32);
    c->train(x);
    EXPECT_GE(mean_cosine(x, c->decode(c->encode(x))), 0.999) << m;
  }
}

TEST(Codec, PcaIsExactOnDataOfItsRank) {
  // Rank-8 data plus a mean: pca:8 reconstructs it up to float rounding.
  const int64_t n = 300, d = 48;
  std::mt19937 rng(5);
  std::normal_distribution<float> g;
  std::vector<float> basis(8 * d), mean(d);
  for (float& v : basis) v = g(rng);
  for (float& v : mean) v = 5 * g(rng);
  Tensor x(DType::f32, {n, d});
  for (int64_t i = 0; i < n; ++i)
    for (int r = 0; r < 8; ++r) {
      const float c = g(rng);
      for (int64_t k = 0; k < d; ++k) x.data<float>()[i * d + k] += c * basis[size_t(r * d + k)] + (r == 0 ? mean[size_t(k)] : 0.f);
    }
  auto c = make_codec("pca:8", d);
  c->train(x);
  const Distortion dist = measure_distortion(x, c->decode(c->encode(x)));
  EXPECT_LT(dist.relative_mse, 1e-5);
  auto c4 = make_codec("pca:4", d);
  c4->train(x);
  EXPECT_GT(measure_distortion(x, c4->decode(c4->encode(x))).relative_mse, 1e-3);  // half the rank is lost
}

TEST(Codec, TooFewTrainingVectorsIsAClearError) {
  const Tensor x = synthetic_embeddings(100, 64, 6);
  for (const char* s : {"pq:8", "opq:8", "pca:200"}) {
    auto c = make_codec(s, s[1] == 'c' ? 256 : 64);
    if (c->dim() != 64) continue;
    try {
      c->train(x);
      ADD_FAILURE() << s;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::unsupported);
      EXPECT_EQ(std::string(e.what()).find("codec " + c->spec() + " needs at least 256 training vectors, got 100"), 0u)
          << e.what();
    }
  }
  auto p = make_codec("pca:100", 128);
  EXPECT_THROW(p->train(synthetic_embeddings(50, 128, 7)), Error);
  auto q = make_codec("int8", 64);
  EXPECT_THROW(q->train(synthetic_embeddings(10, 32, 7)), Error);  // wrong D
  EXPECT_THROW(q->encode(x), Error);                                // untrained
}

TEST(Codec, PqAndOpqRoundTripThroughFaiss) {
  const int64_t d = 32;
  const Tensor train = synthetic_embeddings(1000, d, 8);
  const Tensor eval = synthetic_embeddings(200, d, 9);
  double mse[2];
  for (int o = 0; o < 2; ++o) {
    auto c = make_codec(o ? "opq:8" : "pq:8", d);
    c->train(train);
    const Tensor r = c->encode(eval);
    ASSERT_EQ(r.dim(1), 8);
    const Distortion dist = measure_distortion(eval, c->decode(r));
    EXPECT_GT(dist.mean_cosine, 0.95) << c->spec();
    mse[o] = dist.relative_mse;
    // Decoding is deterministic and encoding a decoded vector gives its code back.
    const Tensor again = c->encode(c->decode(r));
    EXPECT_EQ(0, std::memcmp(again.bytes(), r.bytes(), r.size_bytes())) << c->spec();
  }
  EXPECT_LT(mse[1], mse[0] * 1.05);  // the learned rotation does not hurt
}

TEST(Codec, CodebooksSaveLoadAndHash) {
  const std::string dir = test::temp_dir("codec_cb");
  const Tensor train = synthetic_embeddings(300, 32, 10);
  const Tensor eval = synthetic_embeddings(50, 32, 11);
  int k = 0;
  for (const char* s : {"int8", "pca:16+int8", "pca:24", "pq:4", "opq:4", "faiss:PCA16,SQ8"}) {
    auto c = make_codec(s, 32);
    c->train(train);
    const std::string path = dir + "/cb" + std::to_string(k++) + ".safetensors";
    save_codebook(*c, path, {{"model", "test"}});
    std::map<std::string, std::string> meta;
    auto back = load_codebook(path, &meta, {.trust_faiss = true});  // faiss: needs consent (CodecCli.Faiss*)
    EXPECT_EQ(back->spec(), c->spec());
    EXPECT_EQ(back->state_hash(), c->state_hash());
    EXPECT_EQ(meta["model"], "test");
    EXPECT_EQ(meta["hash"], c->state_hash());
    const Tensor a = c->decode(c->encode(eval)), b = back->decode(back->encode(eval));
    EXPECT_EQ(0, std::memcmp(a.bytes(), b.bytes(), a.size_bytes())) << s;
  }
  // Another training set, another hash.
  auto c1 = make_codec("int8", 32), c2 = make_codec("int8", 32);
  c1->train(train);
  c2->train(eval);
  EXPECT_NE(c1->state_hash(), c2->state_hash());
  // An edited codebook is caught by its hash.
  const std::string path = dir + "/edited.safetensors";
  save_codebook(*c1, path);
  const SafetensorsFile f = SafetensorsFile::open(path);
  Tensor lo = f.load(*f.find("int8.lo"));
  Tensor step = f.load(*f.find("int8.step"));
  lo.data<float>()[0] += 1;
  save_safetensors(path, {{"int8.lo", &lo}, {"int8.step", &step}}, f.metadata());
  try {
    load_codebook(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::corrupt_data);
    EXPECT_NE(std::string(e.what()).find("do not match the hash"), std::string::npos) << e.what();
  }
}

// Tokens of a quadtree: positions (cx, cy, side, level) with P = 16.
void add_token(std::vector<float>& pos, int level, int ix, int iy) {
  const float side = float(16 << level);
  pos.insert(pos.end(), {(float(ix) + 0.5f) * side, (float(iy) + 0.5f) * side, side, float(level)});
}

TEST(CodecMerge, FourSimilarSiblingsBecomeTheirParent) {
  // Level 0: a 4x4 block of tokens at (0..3, 0..3); level 1: tokens (2..3, 0..1) next to it.
  std::vector<float> pos;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) add_token(pos, 0, x, y);
  for (int y = 0; y < 2; ++y)
    for (int x = 2; x < 4; ++x) add_token(pos, 1, x, y);
  const int64_t n = int64_t(pos.size() / 4), d = 8;
  Tensor p(DType::f32, {n, 4});
  std::memcpy(p.bytes(), pos.data(), pos.size() * 4);
  Tensor e(DType::f32, {n, d});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < d; ++k) e.data<float>()[i * d + k] = float(k + 1);  // all alike...
  e.data<float>()[5 * d + 0] = -50;  // ...but token (1, 1): its quadrant (0..1, 0..1) stays
  const MergeResult m = merge_siblings(e, p, {.min_cosine = 0.99f});
  // Level 0: quadrants (1,0), (0,1), (1,1) merge into level-1 tokens; (0,0) holds token 5.
  // Level 1: the four tokens of level-2 box (1,0) merge; box (0,0) lacks its (0,0) quadrant.
  EXPECT_EQ(m.groups_per_level.at(0), 3);
  EXPECT_EQ(m.groups_per_level.at(1), 1);
  EXPECT_EQ(m.groups_merged, 4);
  // Left: the 4 level-0 tokens of quadrant (0,0), 3 level-1 tokens, 1 level-2 token.
  ASSERT_EQ(m.embeddings.dim(0), 4 + 3 + 1);
  EXPECT_EQ(m.levels.data<int32_t>()[0], 0);
  EXPECT_EQ(m.levels.data<int32_t>()[4], 1);
  EXPECT_EQ(m.levels.data<int32_t>()[7], 2);
  const float* q = m.positions.data<float>();
  EXPECT_FLOAT_EQ(q[7 * 4 + 0], 96.f);  // level-2 box (1, 0): x 64..128
  EXPECT_FLOAT_EQ(q[7 * 4 + 1], 32.f);
  EXPECT_FLOAT_EQ(q[7 * 4 + 2], 64.f);
  EXPECT_FLOAT_EQ(q[7 * 4 + 3], 2.f);
  // Every input token maps to a row covering it.
  for (int64_t i = 0; i < n; ++i) {
    const int32_t r = m.parent.data<int32_t>()[i];
    const float* a = pos.data() + 4 * i;
    const float* b = q + 4 * r;
    EXPECT_LE(std::fabs(a[0] - b[0]), b[2] / 2) << i;
    EXPECT_LE(std::fabs(a[1] - b[1]), b[2] / 2) << i;
  }
  const Tensor u = unmerge(m);
  EXPECT_EQ(u.dim(0), n);
  EXPECT_FLOAT_EQ(u.data<float>()[5 * d], -50.f);  // unmerged token keeps its embedding
  // Identical siblings merge even at cosine 1; a uniform grid (non-integer levels) is refused.
  EXPECT_EQ(merge_siblings(e, p, {.min_cosine = 1.0f}).groups_merged, 4);
  p.data<float>()[3] = 0.5f;
  EXPECT_THROW(merge_siblings(e, p), Error);
}

TEST(CodecDistortion, MeasuresWhatItSays) {
  const Tensor x = synthetic_embeddings(200, 32, 12);
  const Distortion same = measure_distortion(x, x);
  EXPECT_DOUBLE_EQ(same.relative_mse, 0);
  EXPECT_NEAR(same.mean_cosine, 1, 1e-12);
  EXPECT_DOUBLE_EQ(same.nn_agreement, 1);
  // Scaling keeps cosines and neighbours; the error is (s-1)^2.
  Tensor y = x.clone();
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] *= 2;
  const Distortion s = measure_distortion(x, y);
  EXPECT_NEAR(s.mean_cosine, 1, 1e-9);
  EXPECT_NEAR(s.relative_mse, 1, 1e-6);
  EXPECT_DOUBLE_EQ(s.nn_agreement, 1);
  // All tokens collapsed to one vector: no neighbour survives except by chance.
  Tensor z(DType::f32, {200, 32});
  for (int64_t i = 0; i < z.numel(); ++i) z.data<float>()[i] = float(i % 32);
  EXPECT_LT(measure_distortion(x, z).nn_agreement, 0.2);
}

}  // namespace
}  // namespace fovea
