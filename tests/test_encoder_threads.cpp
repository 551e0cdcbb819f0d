// Concurrent encodes: several threads encode on one shared model, each on its own
// EncoderContext (or on a context the model's pool lends), and on models of their own, each with
// a one-thread executor, and every result equals the serial one bit for bit, at fp32 and (where
// the CPU has bf16 kernels) bf16. The model's packed weights are made by whichever thread needs
// them first and read by all. Two contexts are shown to be inside encode() at the same moment
// (a rendezvous in the attention probe, not a timing). In the TSan build (label tsan) these are
// the encoder's race checks: one-thread executors keep OpenMP, whose runtime is not
// instrumented, from spawning a team.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "encoder/encoder_internal.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/incremental_encoder.hpp"
#include "fovea/tokenize.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

struct Tokens {
  Tensor patches, positions;
};

Tokens tokens(const VitConfig& c, int64_t n, uint32_t seed) {
  Tokens t{Tensor(DType::f32, {n, c.channels, c.patch_px, c.patch_px}), Tensor(DType::f32, {n, 4})};
  uint32_t s = seed;
  auto next = [&] {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    return float(s % 100000) / 100000.0f;
  };
  for (int64_t i = 0; i < t.patches.numel(); ++i) t.patches.data<float>()[i] = next() * 4 - 2;
  for (int64_t i = 0; i < n; ++i) {
    float* p = t.positions.data<float>() + i * 4;
    p[0] = next() * 256, p[1] = next() * 256, p[2] = float(c.patch_px), p[3] = 0;
  }
  return t;
}

// Small, but with the head width (64) fovea's AVX512-BF16 and AMX attention kernels take and
// oneDNN's blocked (packed) weight layouts where the CPU has them.
VitModel small_model() {
  VitConfig c;
  c.hidden = 128, c.heads = 2, c.mlp = 256, c.layers = 2, c.grid = 4;
  c.pre_norm = true;
  return VitModel::random(c, 5, "threads-test");
}

std::vector<Precision> precisions() {
  std::vector<Precision> p{Precision::fp32};
  if (bf16_supported()) p.push_back(Precision::bf16);
  return p;
}

std::string name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.bytes(), b.bytes(), a.size_bytes()) == 0;
}

// Runs fn(t) on `threads` threads at once; counts what each threw.
template <typename Fn>
std::vector<std::string> run_threads(int threads, Fn&& fn) {
  std::vector<std::string> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        fn(t);
      } catch (const std::exception& e) {
        errors[size_t(t)] = e.what();
      }
    });
  for (std::thread& th : pool) th.join();
  return errors;
}

TEST(EncoderThreads, ConcurrentEncodesEqualTheSerialOne) {
  const VitModel shared = VitModel::load("random:vit-tiny:5");
  const Tokens in = tokens(shared.config(), 40, 777);
  const EncodeParams params{.precision = Precision::fp32, .image_width = 256, .image_height = 256};
  Executor one(ExecConfig{.threads = 1});
  const Encoding want = encode(shared, in.patches, in.positions, params, one);

  constexpr int kThreads = 3, kRounds = 2;
  std::vector<int> mismatches(kThreads, 0);
  const std::vector<std::string> errors = run_threads(kThreads, [&](int t) {
    const VitModel own = VitModel::load("random:vit-tiny:5");  // same weights, its own packed copies
    Executor ex(ExecConfig{.threads = 1});
    for (int r = 0; r < kRounds; ++r)
      for (const VitModel* m : {&shared, &own})
        if (!same_bytes(encode(*m, in.patches, in.positions, params, ex).embeddings, want.embeddings))
          ++mismatches[size_t(t)];
  });
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[size_t(t)], "") << "thread " << t;
    EXPECT_EQ(mismatches[size_t(t)], 0) << "thread " << t;
  }
}

// Two threads, each with its own context, on one model that neither has used before (so they
// race to count the weights' uses and to pack them): different images, then the same image;
// every round gives the bytes of a serial run on another instance of the model.
TEST(EncoderThreads, TwoContextsOnOneModelGiveTheSerialBytes) {
  const VitModel reference = small_model();
  const Tokens a = tokens(reference.config(), 37, 11), b = tokens(reference.config(), 52, 12);
  Executor serial_exec(ExecConfig{.threads = 1});
  constexpr int kRounds = 3;
  for (const Precision prec : precisions()) {
    SCOPED_TRACE(name(prec));
    const EncodeParams params{.precision = prec, .image_width = 256, .image_height = 256};
    EncoderContext serial_ctx;
    const Encoding want_a = encode(serial_ctx, reference, a.patches, a.positions, params, serial_exec);
    const Encoding want_b = encode(serial_ctx, reference, b.patches, b.positions, params, serial_exec);
    for (const bool same_image : {false, true}) {
      SCOPED_TRACE(same_image ? "the same image" : "different images");
      const VitModel shared = small_model();
      std::vector<int> mismatches(2, 0);
      const std::vector<std::string> errors = run_threads(2, [&](int t) {
        const Tokens& in = t == 0 || same_image ? a : b;
        const Encoding& want = t == 0 || same_image ? want_a : want_b;
        EncoderContext ctx;
        Executor ex(ExecConfig{.threads = 1});
        for (int r = 0; r < kRounds; ++r) {
          const Encoding e = encode(ctx, shared, in.patches, in.positions, params, ex);
          if (!same_bytes(e.embeddings, want.embeddings) || !same_bytes(e.class_token, want.class_token))
            ++mismatches[size_t(t)];
        }
      });
      for (int t = 0; t < 2; ++t) {
        EXPECT_EQ(errors[size_t(t)], "") << "thread " << t;
        EXPECT_EQ(mismatches[size_t(t)], 0) << "thread " << t;
      }
      // One model, one set of copies: as many as one context makes for the same encodes, alone.
      const VitModel replay = small_model();
      EncoderContext alone;
      for (int r = 0; r < kRounds; ++r)
        for (const Tokens* in : {&a, same_image ? &a : &b})
          encode(alone, replay, in->patches, in->positions, params, serial_exec);
      EXPECT_EQ(shared.impl().packed.stats().weights, replay.impl().packed.stats().weights);
      EXPECT_EQ(shared.impl().packed.stats().bytes, replay.impl().packed.stats().bytes);
    }
  }
}

// Both contexts are inside encode() at once: each one's attention probe (layer 0, called with
// the model's packed weights in use) waits until the other has reached its own. Were encodes on
// one model serialised, the first would wait in vain (for minutes, then fail) instead.
TEST(EncoderThreads, TwoContextsAreInsideEncodeAtTheSameTime) {
  const VitModel shared = small_model();
  const Tokens in = tokens(shared.config(), 30, 21);
  std::mutex mutex;
  std::condition_variable arrived;
  int inside = 0;
  std::vector<char> met(2, 0);
  for (const Precision prec : precisions()) {
    SCOPED_TRACE(name(prec));
    inside = 0;
    met.assign(2, 0);
    const EncodeParams params{.precision = prec, .image_width = 256, .image_height = 256};
    const std::vector<std::string> errors = run_threads(2, [&](int t) {
      EncoderContext ctx;
      ctx.impl().attention_probe = [&, t](int layer, const std::byte*, DType, int64_t) {
        if (layer != 0) return;
        std::unique_lock<std::mutex> lock(mutex);
        ++inside;
        arrived.notify_all();
        met[size_t(t)] = arrived.wait_for(lock, std::chrono::minutes(5), [&] { return inside >= 2; });
      };
      Executor ex(ExecConfig{.threads = 1});
      encode(ctx, shared, in.patches, in.positions, params, ex);
    });
    for (int t = 0; t < 2; ++t) {
      EXPECT_EQ(errors[size_t(t)], "") << "thread " << t;
      EXPECT_TRUE(met[size_t(t)]) << "thread " << t << " never saw the other inside encode()";
    }
  }
}

// A context serves one call at a time: a second call on it while the first runs is refused
// with a clear error (not a race), and the context works again afterwards.
TEST(EncoderThreads, AContextInUseRefusesASecondCall) {
  const VitModel model = small_model();
  const Tokens in = tokens(model.config(), 20, 31);
  const EncodeParams params{.image_width = 256, .image_height = 256};
  Executor ex(ExecConfig{.threads = 1});
  EncoderContext ctx;
  std::string nested;
  ctx.impl().attention_probe = [&](int layer, const std::byte*, DType, int64_t) {
    if (layer != 0) return;
    try {
      encode(ctx, model, in.patches, in.positions, params, ex);
    } catch (const Error& e) {
      nested = e.what();
    }
  };
  const Encoding first = encode(ctx, model, in.patches, in.positions, params, ex);
  EXPECT_NE(nested.find("this EncoderContext is serving another call"), std::string::npos) << nested;
  ctx.impl().attention_probe = {};
  EXPECT_TRUE(same_bytes(encode(ctx, model, in.patches, in.positions, params, ex).embeddings, first.embeddings));
}

// The calls without a context do not wait for one another: while a pooled context is lent out,
// another call gets a second one.
TEST(EncoderThreads, CallsWithoutAContextBorrowOneEach) {
  const VitModel model = small_model();
  const Tokens in = tokens(model.config(), 20, 41);
  const EncodeParams params{.image_width = 256, .image_height = 256};
  Executor ex(ExecConfig{.threads = 1});
  const Encoding alone = encode(model, in.patches, in.positions, params, ex);
  EXPECT_EQ(model.impl().contexts.size(), 1u);
  {
    encoder_detail::ContextPool::Lease held = model.impl().contexts.take();  // a call in progress
    EXPECT_TRUE(same_bytes(encode(model, in.patches, in.positions, params, ex).embeddings, alone.embeddings));
    EXPECT_EQ(model.impl().contexts.size(), 2u);
  }
  encode(model, in.patches, in.positions, params, ex);
  EXPECT_EQ(model.impl().contexts.size(), 2u) << "contexts given back are reused";
}

// Every entry point with a context gives the bytes of its pooled form: encode_batch,
// encode_tokens (windows), the tile-feature hook, an incremental encoder on a given context;
// run on two threads at once, each with its own context.
TEST(EncoderThreads, ContextEntryPointsGiveThePooledBytes) {
  const VitModel model = small_model();
  const VitConfig& c = model.config();
  TokenizeParams tp;
  tp.patch_px = c.patch_px;
  tp.foveation = Foveation::windows;
  tp.windows.grid = c.grid;
  tp.alloc.budget_tokens = 40;
  Executor ex(ExecConfig{.threads = 1});
  const ImageU8 img = test::random_image(160, 120, 3, 51);
  Query q;
  q.fixations.push_back({60, 50});
  const Tokenization t = tokenize(img.clone(), q, tp, ex);
  ASSERT_TRUE(t.batch.windowed());
  const Tokens a = tokens(c, 24, 52), b = tokens(c, 17, 53);
  Tensor patches(DType::f32, {41, c.channels, c.patch_px, c.patch_px}), positions(DType::f32, {41, 4});
  std::memcpy(patches.bytes(), a.patches.bytes(), a.patches.size_bytes());
  std::memcpy(patches.bytes() + a.patches.size_bytes(), b.patches.bytes(), b.patches.size_bytes());
  std::memcpy(positions.bytes(), a.positions.bytes(), a.positions.size_bytes());
  std::memcpy(positions.bytes() + a.positions.size_bytes(), b.positions.bytes(), b.positions.size_bytes());
  const ImageSpan spans[2] = {{24, 256, 256}, {17, 200, 120}};
  const EncodeParams params{};
  const std::vector<Encoding> batch = encode_batch(model, patches, positions, spans, params, ex);
  const Encoding windows = encode_tokens(model, t.batch, params, ex);
  const Tensor features = tile_feature_fn(model, Normalization{}, c.hidden, ex)(t.pyramid, t.relevance.grid);
  const IncrementalParams ip{.image_width = 256, .image_height = 256};
  const IncrementalResult inc = IncrementalEncoder(model).encode(a.patches, a.positions, {}, {}, ip, ex);

  std::vector<int> mismatches(2, 0);
  const std::vector<std::string> errors = run_threads(2, [&](int th) {
    EncoderContext ctx;
    Executor one(ExecConfig{.threads = 1});
    for (int r = 0; r < 2; ++r) {
      const std::vector<Encoding> got = encode_batch(ctx, model, patches, positions, spans, params, one);
      mismatches[size_t(th)] += !same_bytes(got[0].embeddings, batch[0].embeddings) +
                                !same_bytes(got[1].embeddings, batch[1].embeddings);
      mismatches[size_t(th)] += !same_bytes(encode_tokens(ctx, model, t.batch, params, one).embeddings, windows.embeddings);
      const TileFeatureFn hook = tile_feature_fn(ctx, model, Normalization{}, c.hidden, one);
      mismatches[size_t(th)] += !same_bytes(hook(t.pyramid, t.relevance.grid), features);
    }
    IncrementalEncoder session(model, EncoderContext(EncoderContextParams{.expect_reuse = true}));
    mismatches[size_t(th)] += !same_bytes(session.encode(a.patches, a.positions, {}, {}, ip, one).embeddings, inc.embeddings);
  });
  for (int th = 0; th < 2; ++th) {
    EXPECT_EQ(errors[size_t(th)], "") << "thread " << th;
    EXPECT_EQ(mismatches[size_t(th)], 0) << "thread " << th;
  }
}

}  // namespace
}  // namespace fovea
