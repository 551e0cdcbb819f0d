// How a checkpoint's weights reach the GEMMs (time to first embedding): matrices are
// read where they lie in the mapped file, converted or packed only when that pays, and every
// path gives the same embeddings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "encoder/encoder_internal.hpp"
#include "fovea/encoder.hpp"
#include "fovea/incremental_encoder.hpp"
#include "fovea/gguf.hpp"
#include "fovea/safetensors.hpp"
#include "gguf_build.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

std::string fixture(const std::string& model, const std::string& file = "model.safetensors") {
  return test::source_dir() + "/tests/data/encoder/" + model + "/" + file;
}

struct FirstCase {
  Tensor patches, positions;
  int width = 0, height = 0;
};

FirstCase first_case(const std::string& model) {
  const SafetensorsFile f = SafetensorsFile::open(fixture(model, "cases.safetensors"));
  const std::string n = f.metadata().at("cases").substr(0, f.metadata().at("cases").find(','));
  FirstCase c;
  c.patches = f.load(*f.find(n + ".patches"));
  c.positions = f.load(*f.find(n + ".positions"));
  c.width = std::stoi(f.metadata().at(n + ".image_width"));
  c.height = std::stoi(f.metadata().at(n + ".image_height"));
  return c;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.bytes(), b.bytes(), a.size_bytes()) == 0;
}

void write_gguf(const std::string& path, const test::GgufBuild& g) {
  const std::vector<uint8_t> b = g.bytes();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// The same weights stored two ways give the same bytes: three encodes of the case on each (the
// first use reads the file's matrices as they lie, the second packs them, the third reuses).
void expect_same_encodes(const VitModel& a, const VitModel& b, const FirstCase& c, Precision prec, Executor& exec) {
  const EncodeParams p{.precision = prec, .image_width = c.width, .image_height = c.height};
  for (int use = 0; use < 3; ++use) {
    SCOPED_TRACE("use " + std::to_string(use + 1));
    const Encoding x = encode(a, c.patches, c.positions, p, exec), y = encode(b, c.patches, c.positions, p, exec);
    EXPECT_TRUE(same_bytes(x.embeddings, y.embeddings));
    EXPECT_TRUE(same_bytes(x.projected, y.projected));
    EXPECT_GT(x.projected.numel(), 0);
  }
}

// The incremental encoder (video) reads out_w's rows itself (the spectral norm in its attention
// bound): a second frame with one patch changed reuses the first's states and gives the same
// bytes and drift estimate on both models.
void expect_same_incremental(const VitModel& a, const VitModel& b, const FirstCase& c, Precision prec, Executor& exec) {
  Tensor next = c.patches.clone();
  next.data<float>()[0] += 0.5f;
  const int64_t n = c.patches.dim(0);
  std::vector<int64_t> same_row(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) same_row[size_t(i)] = i;
  std::vector<uint8_t> dirty(static_cast<size_t>(n), 0);
  dirty[0] = 1;
  const IncrementalParams ip{.precision = prec, .image_width = c.width, .image_height = c.height};
  IncrementalEncoder inc_a(a), inc_b(b);
  for (IncrementalEncoder* inc : {&inc_a, &inc_b}) inc->encode(c.patches, c.positions, {}, {}, ip, exec);
  const IncrementalResult ra = inc_a.encode(next, c.positions, same_row, dirty, ip, exec);
  const IncrementalResult rb = inc_b.encode(next, c.positions, same_row, dirty, ip, exec);
  EXPECT_TRUE(ra.approximate) << "the second frame must reuse the first's states";
  EXPECT_TRUE(same_bytes(ra.embeddings, rb.embeddings));
  EXPECT_EQ(ra.drift_estimate, rb.drift_estimate);
}

// F32 and BF16 matrices are views of the mapping (no copy); F16 ones are decoded to f32; HF's
// separate q, k, v are stacked into one owned matrix of the file's type.
TEST(EncoderWeights, CheckpointMatricesAreViewsOfTheMappedFile) {
  {
    const VitModel m = VitModel::load(fixture("torchvision"));  // F32, q|k|v stored stacked
    ASSERT_FALSE(m.impl().layers.empty());
    for (const VitLayer& l : m.impl().layers)
      for (const WeightMatrix* w : {&l.qkv_w, &l.out_w, &l.fc1_w, &l.fc2_w}) {
        EXPECT_TRUE(w->mapped());
        EXPECT_EQ(w->dtype, DType::f32);
      }
    EXPECT_NE(m.impl().mapping, nullptr) << "the model must keep the file its weights point into";
  }
  {
    const VitModel m = VitModel::load(fixture("siglip"));  // BF16, separate q, k, v
    for (const VitLayer& l : m.impl().layers) {
      for (const WeightMatrix* w : {&l.out_w, &l.fc1_w, &l.fc2_w}) {
        EXPECT_TRUE(w->mapped());
        EXPECT_EQ(w->dtype, DType::bf16);
      }
      EXPECT_FALSE(l.qkv_w.mapped());
      EXPECT_EQ(l.qkv_w.dtype, DType::bf16) << "stacking must keep BF16 weights in BF16";
      EXPECT_EQ(l.qkv_w.rows, 3 * l.qkv_w.cols);
    }
  }
  {
    const VitModel m = VitModel::load(fixture("clip_full"));  // F16: decoded
    for (const VitLayer& l : m.impl().layers)
      for (const WeightMatrix* w : {&l.qkv_w, &l.out_w, &l.fc1_w, &l.fc2_w}) {
        EXPECT_FALSE(w->mapped());
        EXPECT_EQ(w->dtype, DType::f32);
      }
    EXPECT_EQ(m.impl().mapping, nullptr) << "nothing points into the file: it need not stay mapped";
  }
}

// An F16 GGUF file (llama.cpp's mmproj files are F16) is not converted at load: its matrices stay
// F16 where they lie in the mapping (q, k, v stacked into one owned F16 matrix), and the GEMMs
// widen them to f32 as they read them.
// Widening is exact, so every encode (first use, packed, bf16) gives the bytes the same weights
// stored as F32 give.
TEST(EncoderWeights, F16GgufMatricesStayF16AndGiveTheF32FilesBytes) {
  const std::string f16_path = fixture("gguf_llava", "mmproj.gguf");
  test::GgufBuild g = test::GgufBuild::from(GgufFile::open(f16_path));
  int f16_tensors = 0;
  for (test::GgufBuild::T& t : g.tensors) {
    if (t.type != uint32_t(GgmlType::f16)) continue;
    ++f16_tensors;
    std::vector<uint8_t> f32(t.data.size() * 2);
    for (size_t i = 0; i < t.data.size() / 2; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      const float v = f16_to_f32(h);
      std::memcpy(f32.data() + 4 * i, &v, 4);
    }
    t.data = std::move(f32);
    t.type = uint32_t(GgmlType::f32);
  }
  ASSERT_GE(f16_tensors, 4) << "the fixture's matrices are F16";
  const std::string f32_path = test::temp_dir("f16_gguf_weights") + "/mmproj-f32.gguf";
  write_gguf(f32_path, g);
  const FirstCase c = first_case("gguf_llava");
  Executor exec({.threads = 2});
  for (const Precision prec : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(prec == Precision::bf16 ? "bf16" : "fp32");
    const VitModel f16 = VitModel::load(f16_path), f32 = VitModel::load(f32_path);
    const VitModel::Impl& m = f16.impl();
    ASSERT_FALSE(m.layers.empty());
    for (const VitLayer& l : m.layers) {
      for (const WeightMatrix* w : {&l.out_w, &l.fc1_w, &l.fc2_w}) {
        EXPECT_TRUE(w->mapped());
        EXPECT_EQ(w->dtype, DType::f16);
      }
      EXPECT_FALSE(l.qkv_w.mapped());
      EXPECT_EQ(l.qkv_w.dtype, DType::f16) << "stacking must keep F16 weights in F16";
    }
    // The projector's matrices: F16 ones stay F16 too (the fixture also holds a Q8_0 one, whose
    // rows are whole blocks: it stays Q8_0).
    const GgufFile file = GgufFile::open(f16_path);
    for (const auto& [name, w] : {std::pair{"mm.0.weight", &m.mm0_w}, {"mm.2.weight", &m.mm2_w}}) {
      const bool f16_stored = file.find_tensor(name)->type == uint32_t(GgmlType::f16);
      const bool q8_stored = file.find_tensor(name)->type == uint32_t(GgmlType::q8_0);
      EXPECT_EQ(w->dtype == DType::f16, f16_stored) << name;
      EXPECT_EQ(w->dtype == kWeightQ8_0, q8_stored) << name;
      EXPECT_EQ(w->mapped(), f16_stored || q8_stored) << name;
    }
    EXPECT_NE(m.mapping, nullptr) << "the model must keep the file its weights point into";
    for (const VitLayer& l : f32.impl().layers) EXPECT_EQ(l.fc1_w.dtype, DType::f32);
    expect_same_encodes(f16, f32, c, prec, exec);  // the first use widens as it reads
    expect_same_incremental(f16, f32, c, prec, exec);
  }
}

// A Q8_0 GGUF file (as llama.cpp's converter writes one: the layer matrices quantized, the patch
// embedding F16) is not decoded at load either: its matrices whose rows are whole blocks stay Q8_0
// where they lie (q, k, v stacked into one owned Q8_0 matrix), and every reader (the GEMMs, the int8
// quantizer, the incremental encoder) decodes rows as it reads them, as load_f32 decodes them. So
// every encode gives the bytes of the same values stored F32; int8 too (it quantizes those rows).
TEST(EncoderWeights, Q8_0GgufMatricesStayQ8_0AndGiveTheDecodedFilesBytes) {
  test::GgufBuild q8 = test::GgufBuild::from(GgufFile::open(fixture("gguf_llava", "mmproj.gguf")));
  int quantized = 0;
  for (test::GgufBuild::T& t : q8.tensors) {
    // ggml's Q8_0: per block of 32, d = amax / 127 (stored f16), q = round(x / d).
    if (t.type != uint32_t(GgmlType::f16) || t.ne.size() != 2 || t.ne[0] % 32 || t.name.find("blk.") == std::string::npos)
      continue;
    const size_t n = t.data.size() / 2, blocks = n / 32;
    std::vector<uint8_t> out(blocks * 34);
    for (size_t b = 0; b < blocks; ++b) {
      float x[32], amax = 0;
      for (int j = 0; j < 32; ++j) {
        uint16_t h;
        std::memcpy(&h, t.data.data() + 2 * (b * 32 + size_t(j)), 2);
        x[j] = f16_to_f32(h);
        amax = std::max(amax, std::fabs(x[j]));
      }
      const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
      const uint16_t dh = f32_to_f16(d);
      std::memcpy(out.data() + b * 34, &dh, 2);
      for (int j = 0; j < 32; ++j) out[b * 34 + 2 + size_t(j)] = uint8_t(int8_t(std::lround(x[j] * id)));
    }
    t.data = std::move(out);
    t.type = uint32_t(GgmlType::q8_0);
    ++quantized;
  }
  ASSERT_GE(quantized, 8) << "the fixture's layer matrices are F16 with rows of whole blocks";
  // The same values decoded to F32 (every Q8_0 tensor: the layers' and the projector's mm.0).
  test::GgufBuild f32 = q8;
  for (test::GgufBuild::T& t : f32.tensors) {
    if (t.type != uint32_t(GgmlType::q8_0)) continue;
    const size_t n = t.data.size() / 34 * 32;
    std::vector<uint8_t> out(n * 4);
    ASSERT_TRUE(ggml_dequantize(t.type, reinterpret_cast<const std::byte*>(t.data.data()), int64_t(n),
                                reinterpret_cast<float*>(out.data())));
    t.data = std::move(out);
    t.type = uint32_t(GgmlType::f32);
  }
  const std::string dir = test::temp_dir("q8_0_gguf_weights");
  const std::string q8_path = dir + "/mmproj-q8_0.gguf", f32_path = dir + "/mmproj-f32.gguf";
  write_gguf(q8_path, q8);
  write_gguf(f32_path, f32);
  const FirstCase c = first_case("gguf_llava");
  Executor exec({.threads = 2});
  for (const Precision prec : {Precision::fp32, Precision::bf16, Precision::int8}) {
    SCOPED_TRACE(prec == Precision::bf16 ? "bf16" : prec == Precision::int8 ? "int8" : "fp32");
    const VitModel a = VitModel::load(q8_path), b = VitModel::load(f32_path);
    const VitModel::Impl& m = a.impl();
    ASSERT_FALSE(m.layers.empty());
    for (const VitLayer& l : m.layers) {
      for (const WeightMatrix* w : {&l.out_w, &l.fc1_w, &l.fc2_w}) {
        EXPECT_TRUE(w->mapped());
        EXPECT_EQ(w->dtype, kWeightQ8_0);
      }
      EXPECT_FALSE(l.qkv_w.mapped());
      EXPECT_EQ(l.qkv_w.dtype, kWeightQ8_0) << "stacking must keep Q8_0 weights in Q8_0";
      EXPECT_EQ(l.qkv_w.size_bytes(), size_t(l.qkv_w.rows * l.qkv_w.cols / 32 * 34));
    }
    EXPECT_TRUE(m.mm0_w.mapped()) << "mm.0 is Q8_0, 32 wide";
    EXPECT_EQ(m.mm0_w.dtype, kWeightQ8_0);
    EXPECT_EQ(m.mm2_w.dtype, DType::f16) << "mm.2 is F16";
    EXPECT_NE(m.mapping, nullptr);
    // Element access decodes the block it lies in.
    const VitLayer& l0 = m.layers[0];
    const VitLayer& r0 = b.impl().layers[0];
    ASSERT_EQ(r0.fc1_w.dtype, DType::f32);
    for (int64_t r : {int64_t(0), l0.fc1_w.rows - 1})
      for (int64_t k : {int64_t(0), int64_t(31), l0.fc1_w.cols - 1}) EXPECT_EQ(l0.fc1_w.at(r, k), r0.fc1_w.at(r, k));
    expect_same_encodes(a, b, c, prec, exec);  // the first use decodes as it reads
    if (prec == Precision::int8) continue;  // (the incremental encoder runs fp32 and bf16)
    expect_same_incremental(a, b, c, prec, exec);
  }
  // Unmapped (map_weights = false): Q8_0 matrices are decoded at load, as before; the same bytes.
  const VitModel owned = VitModel::load(q8_path, {.map_weights = false});
  EXPECT_EQ(owned.impl().layers[0].fc1_w.dtype, DType::f32);
  const EncodeParams p{.image_width = c.width, .image_height = c.height};
  EXPECT_TRUE(same_bytes(encode(owned, c.patches, c.positions, p, exec).projected,
                         encode(VitModel::load(f32_path), c.patches, c.positions, p, exec).projected));
}

// The model keeps the file mapped whenever any matrix points into it, the projector's too: with
// clip.vision.feature_layer 0 no block runs (no layer matrix is loaded), and a projector matrix
// (the fixture's F16 mm.2, whose width is no multiple of Q8_0's block) is the only view left.
TEST(EncoderWeights, AProjectorViewKeepsTheFileMapped) {
  const std::string path = test::temp_dir("f16_gguf_projector") + "/no-blocks.gguf";
  test::GgufBuild g = test::GgufBuild::from(GgufFile::open(fixture("gguf_llava", "mmproj.gguf")));
  g.set("clip.vision.feature_layer", test::array(GgufType::i32, {int64_t(0)}));
  {
    const std::vector<uint8_t> b = g.bytes();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
  const FirstCase c = first_case("gguf_llava");
  Executor exec({.threads = 2});
  const EncodeParams p{.image_width = c.width, .image_height = c.height};
  Tensor before;
  {
    const VitModel m = VitModel::load(path);
    ASSERT_TRUE(m.impl().layers.empty());
    ASSERT_TRUE(m.impl().mm2_w.mapped()) << "the fixture's mm.2 is F16";
    EXPECT_NE(m.impl().mapping, nullptr);
    before = encode(m, c.patches, c.positions, p, exec).projected;
  }
  // Encoded after the first model is gone: each model reads its own, live mapping (a view into a
  // released one read unmapped memory: a crash or another projection).
  const VitModel again = VitModel::load(path);
  EXPECT_TRUE(same_bytes(before, encode(again, c.patches, c.positions, p, exec).projected));
  EXPECT_GT(before.numel(), 0);
}

// map_weights = false: the same matrices, copied in their own type; the file is not kept.
TEST(EncoderWeights, UnmappedWeightsAreOwnedCopiesGivingTheSameEmbeddings) {
  for (const std::string name : {"torchvision", "siglip"}) {
    SCOPED_TRACE(name);
    const VitModel mapped = VitModel::load(fixture(name));
    const VitModel owned = VitModel::load(fixture(name), {.map_weights = false});
    EXPECT_EQ(owned.impl().mapping, nullptr);
    ASSERT_EQ(owned.impl().layers.size(), mapped.impl().layers.size());
    for (size_t i = 0; i < owned.impl().layers.size(); ++i) {
      const VitLayer& a = mapped.impl().layers[i];
      const VitLayer& b = owned.impl().layers[i];
      for (auto [wa, wb] : {std::pair{&a.out_w, &b.out_w}, {&a.fc1_w, &b.fc1_w}, {&a.fc2_w, &b.fc2_w}}) {
        EXPECT_FALSE(wb->mapped());
        EXPECT_EQ(wb->dtype, wa->dtype) << "a copy keeps the file's type";
        ASSERT_EQ(wb->size_bytes(), wa->size_bytes());
        EXPECT_EQ(std::memcmp(wa->data, wb->data, wa->size_bytes()), 0);
      }
    }
    const FirstCase c = first_case(name);
    Executor exec({.threads = 2});
    const EncodeParams p{.image_width = c.width, .image_height = c.height};
    EXPECT_TRUE(same_bytes(encode(mapped, c.patches, c.positions, p, exec).embeddings,
                           encode(owned, c.patches, c.positions, p, exec).embeddings));
  }
}

// The first encode reads the weights in place (fp32) or converts them into a reused buffer
// (bf16 from an F32 file) and packs nothing; the second packs them; the third reuses the
// packed copies. All three give the same bytes.
TEST(EncoderWeights, InPlaceConvertedAndPackedWeightsGiveTheSameEmbeddings) {
  for (const std::string name : {"torchvision", "siglip"}) {
    for (const Precision prec : {Precision::fp32, Precision::bf16}) {
      SCOPED_TRACE(name + (prec == Precision::bf16 ? " bf16" : " fp32"));
      const VitModel model = VitModel::load(fixture(name));
      const FirstCase c = first_case(name);
      Executor exec({.threads = 2});
      const EncodeParams p{.precision = prec, .image_width = c.width, .image_height = c.height};
      const Encoding first = encode(model, c.patches, c.positions, p, exec);
      const encoder_detail::PackedWeights& cache = model.impl().packed;
      EXPECT_EQ(cache.stats().weights, 0) << "a one-shot encode must not pack (copy) weights";
      EXPECT_EQ(cache.stats().bytes, 0u);
      const Encoding second = encode(model, c.patches, c.positions, p, exec);
      const encoder_detail::PackedWeights::Stats packed = cache.stats();
      // Where the kernels have a blocked layout (brgemm: AVX-512 / AMX), 4 matrices per layer plus
      // the patch embedding (+ the projector, none here); elsewhere (AVX2) only the weights whose
      // type is not the kernel's are copied (converted), f32 ones are read as they lie.
      const DType kernel = runnable_precision(prec) == Precision::bf16 ? DType::bf16 : DType::f32;
      const bool blocked = encoder_detail::Gemm().packs_weights(kernel);
      int expected = blocked || kernel != DType::f32 ? 1 : 0;  // the patch embedding: f32
      for (const VitLayer& l : model.impl().layers)
        for (const WeightMatrix* w : {&l.qkv_w, &l.out_w, &l.fc1_w, &l.fc2_w}) expected += blocked || w->dtype != kernel;
      EXPECT_EQ(packed.weights, expected);
      EXPECT_EQ(packed.bytes > 0, expected > 0);
      const Encoding third = encode(model, c.patches, c.positions, p, exec);
      EXPECT_EQ(cache.stats().weights, packed.weights) << "packed weights must be reused, not repacked";
      EXPECT_EQ(cache.stats().bytes, packed.bytes);
      EXPECT_TRUE(same_bytes(first.embeddings, second.embeddings));
      EXPECT_TRUE(same_bytes(second.embeddings, third.embeddings));
    }
  }
}

// The same at ViT-B/16's sizes (K = 768 and 3072 span several of the kernels' K blocks, so a
// different layout could change the summation order): the first, in-place or converted use and
// the packed ones agree to the bit.
TEST(EncoderWeights, FirstAndPackedUsesAgreeAtVitB16Sizes) {
  const int n = 271;  // + the class token: M = 272, where a bf16 plain layout changed the bits
  Tensor patches(DType::f32, {n, 3, 16, 16}), positions(DType::f32, {n, 4});
  uint32_t s = 7;
  for (int64_t i = 0; i < patches.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    patches.data<float>()[i] = float(s >> 8) / float(1 << 24) * 4 - 2;
  }
  for (int i = 0; i < n; ++i) {
    float* p = positions.data<float>() + i * 4;
    p[0] = (i % 17 + 0.5f) * 16, p[1] = (i / 17 + 0.5f) * 16, p[2] = 16, p[3] = 0;
  }
  Executor exec({.threads = 2});
  // f32 weights (an F32 file) at both precisions, and bf16 weights (a BF16 file) at bf16.
  for (const auto& [prec, bf16_weights] : {std::pair{Precision::fp32, false}, {Precision::bf16, false}, {Precision::bf16, true}}) {
    SCOPED_TRACE(std::string(prec == Precision::bf16 ? "bf16" : "fp32") + (bf16_weights ? ", bf16 weights" : ""));
    VitConfig c;  // ViT-B/16's widths, two layers (the shapes matter, not the depth)
    c.hidden = 768, c.heads = 12, c.mlp = 3072, c.layers = 2;
    VitModel model = VitModel::random(c, 1, "vit-b16-widths");
    if (bf16_weights) {  // as a BF16 checkpoint would hold them
      for (VitLayer& l : encoder_detail::ModelAccess::unshared(model).layers)
        for (WeightMatrix* w : {&l.qkv_w, &l.out_w, &l.fc1_w, &l.fc2_w}) {
          Tensor t(DType::bf16, {w->rows, w->cols});
          encoder_detail::to_bf16_row(static_cast<const float*>(w->data), t.data<uint16_t>(), w->rows * w->cols);
          *w = WeightMatrix(std::move(t));
        }
    }
    const EncodeParams p{.precision = prec, .image_width = 272, .image_height = 256};
    const Encoding first = encode(model, patches, positions, p, exec);
    EXPECT_EQ(model.impl().packed.stats().weights, 0);
    const Encoding second = encode(model, patches, positions, p, exec);
    const DType kernel = runnable_precision(prec) == Precision::bf16 ? DType::bf16 : DType::f32;
    // See the test above: copied where the kernels block their weights, or where a weight's type
    // is not the kernel's: a BF16 file read by f32 kernels, or any bf16 encode's f32 patch
    // embedding (bf16 kernels that do not block: an AVX-512 CPU without native bf16, where
    // oneDNN's bf16 matmul is gemm:jit).
    const DType weights = bf16_weights ? DType::bf16 : DType::f32;
    const bool copies = encoder_detail::Gemm().packs_weights(kernel) || weights != kernel || kernel != DType::f32;
    EXPECT_EQ(model.impl().packed.stats().weights > 0, copies);
    EXPECT_TRUE(same_bytes(first.embeddings, second.embeddings));
  }
}

// A context made with expect_reuse (as an IncrementalEncoder's, a video session's) packs the
// weights at their first use, not at their second; the embeddings are the bytes the packed path
// gives anyway. Other contexts on the model then read those copies: none is made twice.
TEST(EncoderWeights, VideoSessionsPackAtTheFirstUse) {
  const FirstCase c = first_case("torchvision");
  Executor exec({.threads = 2});
  for (const Precision prec : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(prec == Precision::bf16 ? "bf16" : "fp32");
    const EncodeParams p{.precision = prec, .image_width = c.width, .image_height = c.height};
    const VitModel plain = VitModel::load(fixture("torchvision"));
    encode(plain, c.patches, c.positions, p, exec);
    const Encoding second = encode(plain, c.patches, c.positions, p, exec);  // packed where packing applies
    const int packed_after_two = plain.impl().packed.stats().weights;

    const VitModel video = VitModel::load(fixture("torchvision"));
    EncoderContext reuse(EncoderContextParams{.expect_reuse = true});
    const Encoding first = encode(reuse, video, c.patches, c.positions, p, exec);
    EXPECT_EQ(video.impl().packed.stats().weights, packed_after_two);
    EXPECT_TRUE(same_bytes(first.embeddings, second.embeddings));
    EncoderContext other;
    EXPECT_TRUE(same_bytes(encode(other, video, c.patches, c.positions, p, exec).embeddings, second.embeddings));
    EXPECT_EQ(video.impl().packed.stats().weights, packed_after_two);

    const VitModel session = VitModel::load(fixture("torchvision"));
    IncrementalEncoder inc(session);
    inc.encode(c.patches, c.positions, {}, {}, {.precision = prec, .image_width = c.width, .image_height = c.height},
               exec);
    EXPECT_EQ(session.impl().packed.stats().weights, packed_after_two);
  }
}

// Uses are counted per kernel type: `encode --check-fp32` (a bf16 encode, then an fp32 one)
// packs no layer weight.
TEST(EncoderWeights, OneEncodePerPrecisionPacksNothing) {
  if (!bf16_supported()) GTEST_SKIP() << "this CPU has no bf16 matrix kernels: a bf16 encode runs fp32";
  const VitModel model = VitModel::load(fixture("torchvision"));
  const FirstCase c = first_case("torchvision");
  Executor exec({.threads = 2});
  EncodeParams p{.precision = Precision::bf16, .image_width = c.width, .image_height = c.height};
  encode(model, c.patches, c.positions, p, exec);
  p.precision = Precision::fp32;
  encode(model, c.patches, c.positions, p, exec);
  // Only the patch embedding, which runs in f32 at both precisions, was used twice.
  EXPECT_EQ(model.impl().packed.stats().weights, 1);
  encode(model, c.patches, c.positions, p, exec);
  EXPECT_EQ(model.impl().packed.stats().weights, 1 + 4 * int(model.impl().layers.size()));
}

// bf16 GEMMs over f32 weights convert them inside oneDNN's reorder; the scalar reference
// rounds them the same way (the conversion is part of the algorithm, not of the kernel).
TEST(EncoderWeights, Bf16FromF32WeightsMatchesTheReferencePath) {
  const VitModel model = VitModel::load(fixture("torchvision"));
  const FirstCase c = first_case("torchvision");
  const EncodeParams p{.precision = Precision::bf16, .image_width = c.width, .image_height = c.height};
  Executor fast({.threads = 2}), ref({.threads = 1, .kernels = Kernels::reference});
  const Encoding a = encode(model, c.patches, c.positions, p, fast);
  const Encoding b = encode(model, c.patches, c.positions, p, ref);
  EXPECT_GE(mean_row_cosine(a.embeddings, b.embeddings), 0.9999);
}

}  // namespace
}  // namespace fovea
