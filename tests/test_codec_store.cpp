// Compressed pages in the token store: the record size replaces dim × dtype, and
// gather_decoded decodes on the CPU for every codec and in the Vulkan gather shader for fp16,
// bf16 and int8 — checked against the codec's own CPU decode on every backend, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "fovea/compress.hpp"
#include "fovea/error.hpp"
#include "fovea/store.hpp"

#ifdef FOVEA_HAVE_VULKAN
#include "vulkan/store/vulkan_store.hpp"
#endif

namespace fovea {
namespace {

std::vector<std::string> backends() {
  std::vector<std::string> names{"host"};
#ifdef FOVEA_HAVE_VULKAN
  names.insert(names.end(), {"vulkan", "vulkan-split", "vulkan-image"});
#endif
  return names;
}

// Every Vulkan backend of these tests reports its validation messages here.
const std::shared_ptr<ValidationLog>& validation_log() {
  static const auto log = std::make_shared<ValidationLog>();
  return log;
}

std::unique_ptr<StoreBackend> backend(const std::string& name) {
  if (name == "host") return make_host_store_backend();
#ifdef FOVEA_HAVE_VULKAN
  std::string why;
  const VulkanStoreOptions options{.device = "", .validation = true, .validation_log = validation_log()};
  auto b = name == "vulkan-image" ? make_vulkan_image_store_backend(&why, options) : make_vulkan_store_backend(&why, options);
  if (!b) throw Error(Errc::device, "the " + name + " store backend is not available: " + why);
  if (name == "vulkan-split") {  // windows of 12 KiB every 6 KiB: decode dispatches cut at windows
    auto& v = dynamic_cast<vulkan_store::VulkanStoreBase&>(*b);
    v.set_window_bytes(12 << 10);
  }
  return b;
#else
  throw Error(Errc::invalid_argument, "no " + name + " backend in this build");
#endif
}

int64_t validation_messages() { return validation_log()->count(); }

Tensor embeddings(int64_t n, int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  Tensor x(DType::f32, {n, d});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g(rng) * (1 + float(i % d) / 8) + (i % d == 3 ? 20.f : 0.f);
  x.data<float>()[7] = 3e-6f;  // an fp16 subnormal
  return x;
}

class CodecStore : public ::testing::TestWithParam<std::string> {};

TEST_P(CodecStore, GatherDecodesEveryCodec) {
  const int64_t messages = validation_messages();
  const int64_t page = GetParam() == "vulkan-image" ? 64 << 10 : 4096;
  // Odd record sizes: 66-byte fp16/bf16 (2 mod 4), 101-byte int8, 8-byte PQ records; tokens
  // straddle pages.
  struct Case {
    const char* spec;
    int64_t dim;
    bool device;  // decoded by the Vulkan buffer backend's shader
  };
  const bool vk_buffer = GetParam() == "vulkan" || GetParam() == "vulkan-split";
  for (const Case& c : {Case{"fp16", 33, vk_buffer}, Case{"bf16", 33, vk_buffer}, Case{"int8", 101, vk_buffer},
                        Case{"pq:8", 32, false}, Case{"pca:8+int8", 32, false}}) {
    SCOPED_TRACE(c.spec);
    std::shared_ptr<Codec> codec = make_codec(c.spec, c.dim);
    codec->train(embeddings(600, c.dim, 1));
    StoreConfig cfg;
    cfg.dim = c.dim;
    cfg.codec = codec;
    cfg.page_bytes = page;
    cfg.pool_pages = 64;
    TokenStore store(cfg, backend(GetParam()));
    EXPECT_EQ(store.token_bytes(), codec->bytes_per_token());
    EXPECT_EQ(store.decodes_on_device(), c.device);
    const Tensor a = embeddings(300, c.dim, 2), b = embeddings(170, c.dim, 3);
    const SeqId s1 = store.reserve(400), s2 = store.reserve(300);
    store.bind_batch({{s1, 0, 300}, {s2, 0, 170}});
    store.write(s1, 0, a);                 // f32 in: encoded by the store
    store.write(s2, 0, codec->encode(b));  // records in
    // Records: what the codec makes.
    const Tensor rec = store.gather({{s2, 10, 100}, {s1, 0, 300}});
    ASSERT_EQ(rec.dtype(), DType::u8);
    ASSERT_EQ(rec.dim(1), codec->bytes_per_token());
    const Tensor ra = codec->encode(a), rb = codec->encode(b);
    const int64_t rb_ = codec->bytes_per_token();
    EXPECT_EQ(0, std::memcmp(rec.bytes(), rb.bytes() + 10 * rb_, size_t(100 * rb_)));
    EXPECT_EQ(0, std::memcmp(rec.bytes() + 100 * rb_, ra.bytes(), ra.size_bytes()));
    // Decoded: exactly the codec's CPU decode, wherever it ran.
    const Tensor got = store.gather_decoded({{s2, 10, 100}, {s1, 0, 300}});
    const Tensor want = codec->decode(rec);
    ASSERT_EQ(got.shape(), want.shape());
    int64_t diff = 0;
    for (int64_t i = 0; i < got.numel(); ++i) diff += std::memcmp(&got.data<float>()[i], &want.data<float>()[i], 4) != 0;
    EXPECT_EQ(diff, 0);
    // Errors: wrong shapes, non-resident tokens.
    EXPECT_THROW(store.write(s1, 0, Tensor(DType::f32, {2, c.dim + 1})), Error);
    EXPECT_THROW(store.write(s1, 0, Tensor(DType::u8, {2, rb_ + 1})), Error);
    EXPECT_THROW(store.gather_decoded({{s1, 299, 2}}), Error);
    // update_frame with f32 tokens re-encodes only what changed.
    Tensor a2 = a.clone();
    a2.data<float>()[5 * c.dim] += 50;
    const FrameDelta delta = store.update_frame(s1, a2);
    EXPECT_EQ(delta.pages_written, 1);  // token 5 lives in the first page
    EXPECT_EQ(delta.pages_unchanged, store.resident_pages(s1) - 1);
    const Tensor back = store.gather_decoded({{s1, 0, 300}});
    const Tensor want2 = codec->decode(codec->encode(a2));
    EXPECT_EQ(0, std::memcmp(back.bytes(), want2.bytes(), want2.size_bytes()));
  }
  EXPECT_EQ(validation_messages(), messages);
}

TEST_P(CodecStore, RecordsShrinkThePages) {
  // Seed 000's first image, 410 kept tokens of D = 768: f16 pages vs int8 vs PQ-96 pages.
  const int64_t page = GetParam() == "vulkan-image" ? 64 << 10 : 4096;
  std::shared_ptr<Codec> int8 = make_codec("int8", 768);
  int8->train(embeddings(300, 768, 4));
  int64_t pages[2];
  for (int k = 0; k < 2; ++k) {
    StoreConfig cfg;
    cfg.dim = 768;
    cfg.page_bytes = page;
    cfg.pool_pages = 256;
    if (k) cfg.codec = int8;
    TokenStore store(cfg, backend(GetParam()));
    const SeqId s = store.reserve(1024);
    store.bind(s, 0, 410);
    pages[k] = store.resident_pages(s);
  }
  EXPECT_EQ(pages[0], (410 * 1536 + page - 1) / page);
  EXPECT_EQ(pages[1], (410 * 768 + page - 1) / page);
}

TEST(CodecStoreConfig, RejectsUntrainedAndMismatchedCodecs) {
  StoreConfig cfg;
  cfg.dim = 64;
  cfg.codec = make_codec("int8", 64);  // not trained
  try {
    TokenStore s(cfg);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "token store codec int8 is not trained (train it or load its codebook)");
  }
  cfg.codec = make_codec("fp16", 32);
  try {
    TokenStore s(cfg);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "token store dim 64 does not match codec fp16 for D = 32");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CodecStore, ::testing::ValuesIn(backends()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace fovea
