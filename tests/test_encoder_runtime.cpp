// (An encoder test file, test_encoder_*.cpp: left out of builds without the encoder.)
// The library keeps no process-wide state: the thread count is per call (Executor), the
// caller's OpenMP team size survives encode() and the query-embedding hook, and two
// tokenize + encode calls running at once on two threads, with different thread counts, give
// the bytes the same calls give one after the other.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/exec.hpp"
#include "fovea/tokenize.hpp"
#include "encoder/encoder_internal.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

// The calling thread's OpenMP team size set for a test and put back afterwards.
class CallerOmpThreads {
 public:
  explicit CallerOmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~CallerOmpThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

TokenizeParams small_params() {
  TokenizeParams p;
  p.patch_px = 16;
  p.alloc.budget_tokens = 40;
  return p;
}

Query fixation_at(float x, float y) {
  Query q;
  q.fixations.push_back({x, y});
  return q;
}

struct Result {
  Tensor patches, positions, embeddings;
};

// On `ctx` when given, else on a context from the model's pool.
Result tokenize_and_encode(const VitModel& model, const ImageU8& image, const Query& query, int threads,
                           EncoderContext* ctx = nullptr) {
  Executor exec({.threads = threads});
  Tokenization t = tokenize(image.clone(), query, small_params(), exec);
  const EncodeParams p{.image_width = image.width(), .image_height = image.height()};
  Encoding e = ctx ? encode(*ctx, model, t.batch.patches, t.batch.positions, p, exec)
                   : encode(model, t.batch.patches, t.batch.positions, p, exec);
  return {std::move(t.batch.patches), std::move(t.batch.positions), std::move(e.embeddings)};
}

void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), a.size_bytes()), 0) << what << ": bytes differ";
}

TEST(Runtime, EncodeAndTileFeaturesRestoreTheCallersOpenMpThreads) {
  const CallerOmpThreads caller(5);
  ASSERT_EQ(omp_get_max_threads(), 5);
  const VitModel model = VitModel::load("random:vit-tiny");
  const ImageU8 img = test::random_image(96, 64, 3, 7);
  for (int threads : {1, 2, 3}) {
    (void)tokenize_and_encode(model, img, fixation_at(30, 20), threads);
    EXPECT_EQ(omp_get_max_threads(), 5) << "after encode with " << threads << " threads";
    Executor exec({.threads = threads});
    Tokenization t = tokenize(img.clone(), {}, small_params(), exec);
    const TileFeatureFn hook = tile_feature_fn(model, Normalization{}, model.config().hidden, exec);
    const Tensor f = hook(t.pyramid, t.relevance.grid);
    EXPECT_EQ(f.dim(0), t.relevance.grid.tiles());
    EXPECT_EQ(omp_get_max_threads(), 5) << "after the tile features with " << threads << " threads";
  }
  // A call that fails leaves it alone too.
  Executor exec({.threads = 2});
  Tensor bad_patches(DType::f32, {1, 3, 8, 8}), positions(DType::f32, {1, 4});
  EXPECT_THROW(encode(model, bad_patches, positions, {.image_width = 8, .image_height = 8}, exec), Error);
  EXPECT_EQ(omp_get_max_threads(), 5);
}

// A model used with 2 threads and then with 1 runs its GEMMs with 1: the thread count is the
// call's, not the first call's. oneDNN fixes a primitive's thread count (and its work split)
// when the primitive is created, so the 1-thread call must get primitives of its own. (The
// embeddings are the same bytes either way on this oneDNN, so bytes cannot show this.)
TEST(Runtime, ThreadCountIsPerCallNotPerModel) {
  const VitModel model = VitModel::load("random:vit-tiny");
  const ImageU8 img = test::random_image(96, 64, 3, 11);
  const Query q = fixation_at(40, 30);
  EncoderContext ctx;
  const Result two = tokenize_and_encode(model, img, q, 2, &ctx);
  const auto& gemm = ctx.impl().gemm;
  ASSERT_NE(gemm, nullptr);
  if (encoder_detail::Gemm::avx2_takes_f32()) {
    // The linear layers run on fovea's AVX2 kernel, which reads the call's team size on every
    // call and keeps nothing per thread count; attention's oneDNN GEMMs run single-threaded
    // inside its parallel tasks. So the oneDNN half of the property is checked on a GEMM the
    // main thread runs on oneDNN (a weight that is not constant, as attention's are).
    const Result one = tokenize_and_encode(model, img, q, 1, &ctx);
    EXPECT_EQ(one.embeddings.shape(), two.embeddings.shape());
    std::vector<float> a(64 * 64, 0.5f), w(64 * 64, 0.25f), c(64 * 64);
    encoder_detail::GemmArgs g{};
    g.a = a.data(), g.lda = 64, g.a_dt = DType::f32, g.w = w.data(), g.ldw = 64, g.w_dt = DType::f32;
    g.c = c.data(), g.ldc = 64, g.c_dt = DType::f32, g.m = 64, g.n = 64, g.k = 64;
    encoder_detail::Gemm direct;
    {
      const encoder_detail::OmpThreadsScope team(2);
      direct.run(g);
    }
    const std::map<int, int> with_two = direct.primitives_per_team_size();
    EXPECT_GT(with_two.count(2), 0u) << "no 2-thread primitive after a 2-thread call";
    {
      const encoder_detail::OmpThreadsScope team(1);
      direct.run(g);
    }
    const std::map<int, int> with_one = direct.primitives_per_team_size();
    EXPECT_GT(with_one.count(1), 0u) << "the 1-thread call reused 2-thread primitives";
    EXPECT_EQ(with_one.at(2), with_two.at(2));
    EXPECT_FLOAT_EQ(c[0], 64 * 0.5f * 0.25f);
    return;
  }
  const std::map<int, int> after_two = gemm->primitives_per_team_size();
  EXPECT_GT(after_two.count(2), 0u) << "no 2-thread primitive after a 2-thread call";
  const Result one = tokenize_and_encode(model, img, q, 1, &ctx);
  const std::map<int, int> after_one = gemm->primitives_per_team_size();
  const int ones_before = after_two.count(1) ? after_two.at(1) : 0;
  EXPECT_GT(after_one.count(1) ? after_one.at(1) : 0, ones_before) << "the 1-thread call reused 2-thread primitives";
  EXPECT_EQ(after_one.at(2), after_two.at(2));
  EXPECT_EQ(one.embeddings.shape(), two.embeddings.shape());
}

// One Gemm runs two shapes in turn on buffers that move from call to call (the primitives' memory
// objects are kept per thread and pointed at each call's buffers): every call reads its own
// inputs, the one bias it is given or none, and writes its own output.
TEST(Runtime, GemmCallsReadAndWriteTheirOwnBuffers) {
  encoder_detail::Gemm gemm;
  const encoder_detail::OmpThreadsScope team(1);
  struct Call {
    int64_t m, n, k;
    bool bias;
  };
  const Call calls[] = {{16, 32, 8, false}, {32, 16, 24, true}};
  for (int round = 0; round < 6; ++round)
    for (const Call& cl : calls) {
      // Fresh buffers each round: new addresses for the same shapes.
      std::vector<float> a(size_t(cl.m * cl.k)), w(size_t(cl.n * cl.k)), b(size_t(cl.n)), c(size_t(cl.m * cl.n), -7.0f);
      for (size_t i = 0; i < a.size(); ++i) a[i] = float((i * 7 + round) % 11) - 5.0f;
      for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 3 + 2 * round) % 13) * 0.25f - 1.5f;
      for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) + float(round);
      encoder_detail::GemmArgs g{};
      g.a = a.data(), g.lda = cl.k, g.a_dt = DType::f32, g.w = w.data(), g.ldw = cl.k, g.w_dt = DType::f32;
      g.c = c.data(), g.ldc = cl.n, g.c_dt = DType::f32, g.m = cl.m, g.n = cl.n, g.k = cl.k;
      if (cl.bias) g.bias = b.data();
      gemm.run(g);
      for (int64_t i = 0; i < cl.m; ++i)
        for (int64_t j = 0; j < cl.n; ++j) {
          double want = cl.bias ? b[size_t(j)] : 0.0;
          for (int64_t q = 0; q < cl.k; ++q) want += double(a[size_t(i * cl.k + q)]) * w[size_t(j * cl.k + q)];
          ASSERT_NEAR(c[size_t(i * cl.n + j)], want, 1e-3) << "round " << round << " m " << cl.m << " (" << i << ", " << j << ")";
        }
    }
}

// A context keeps at most max_primitives oneDNN primitives (the least recently used dropped): many
// image sizes leave it bounded, and a size whose primitives were dropped encodes to the same bytes.
TEST(Runtime, ContextKeepsAtMostItsPrimitives) {
  const VitModel model = VitModel::load("random:vit-tiny");
  EncoderContext small({.max_primitives = 3}), large;
  std::vector<Tensor> first;
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < 6; ++i) {
      const ImageU8 img = test::random_image(64 + 16 * i, 48, 3, 30 + i);  // another token count each
      const Result a = tokenize_and_encode(model, img, fixation_at(20, 20), 1, &small);
      const Result b = tokenize_and_encode(model, img, fixation_at(20, 20), 1, &large);
      ASSERT_EQ(a.embeddings.size_bytes(), b.embeddings.size_bytes());
      EXPECT_EQ(std::memcmp(a.embeddings.bytes(), b.embeddings.bytes(), a.embeddings.size_bytes()), 0) << pass << " " << i;
      ASSERT_NE(small.impl().gemm, nullptr);
      EXPECT_LE(small.impl().gemm->primitives(), 3u);
    }
  if (!encoder_detail::Gemm::avx2_takes_f32()) {
    EXPECT_GT(large.impl().gemm->primitives(), 3u);  // it made more than the small one keeps
  }
}

// Two threads tokenize and encode at once, with 1 and 2 threads, on one shared model and on
// two models; each gets the bytes of the same call run alone.
TEST(Runtime, ConcurrentTokenizeEncodeEqualsSerial) {
  const VitModel shared = VitModel::load("random:vit-s16");
  const VitModel other = VitModel::load("random:vit-s16");
  const ImageU8 img_a = test::random_image(160, 128, 3, 21);
  const ImageU8 img_b = test::random_image(128, 192, 3, 22);
  const Query qa = fixation_at(30, 40), qb = fixation_at(100, 150);
  constexpr int kThreadsA = 1, kThreadsB = 2;
  const Result serial_a = tokenize_and_encode(shared, img_a, qa, kThreadsA);
  const Result serial_b = tokenize_and_encode(shared, img_b, qb, kThreadsB);
  ASSERT_GT(serial_a.embeddings.numel(), 0);

  for (const VitModel* model_b : {&shared, &other}) {
    const bool same_model = model_b == &shared;
    constexpr int kRounds = 3;
    std::vector<Result> got_a(kRounds), got_b(kRounds);
    std::exception_ptr error_a, error_b;
    int omp_a = 0, omp_b = 0;
    std::thread ta([&] {
      try {
        omp_set_num_threads(6);  // this thread's own OpenMP setting: must survive the calls
        for (int r = 0; r < kRounds; ++r) got_a[r] = tokenize_and_encode(shared, img_a, qa, kThreadsA);
        omp_a = omp_get_max_threads();
      } catch (...) {
        error_a = std::current_exception();
      }
    });
    std::thread tb([&] {
      try {
        omp_set_num_threads(7);
        for (int r = 0; r < kRounds; ++r) got_b[r] = tokenize_and_encode(*model_b, img_b, qb, kThreadsB);
        omp_b = omp_get_max_threads();
      } catch (...) {
        error_b = std::current_exception();
      }
    });
    ta.join();
    tb.join();
    ASSERT_FALSE(error_a) << "thread A threw";
    ASSERT_FALSE(error_b) << "thread B threw";
    EXPECT_EQ(omp_a, 6);
    EXPECT_EQ(omp_b, 7);
    const std::string how = same_model ? "one shared model" : "two models";
    for (int r = 0; r < kRounds; ++r) {
      expect_same_bytes(got_a[r].patches, serial_a.patches, "A patches, " + how);
      expect_same_bytes(got_a[r].positions, serial_a.positions, "A positions, " + how);
      expect_same_bytes(got_a[r].embeddings, serial_a.embeddings, "A embeddings, " + how);
      expect_same_bytes(got_b[r].patches, serial_b.patches, "B patches, " + how);
      expect_same_bytes(got_b[r].positions, serial_b.positions, "B positions, " + how);
      expect_same_bytes(got_b[r].embeddings, serial_b.embeddings, "B embeddings, " + how);
    }
  }
}

}  // namespace
}  // namespace fovea
