// The eight-image memory table with compressed pages: what int8 and PQ records do to the
// store's resident memory, and what decode-on-gather costs.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "fovea/compress.hpp"
#include "fovea/error.hpp"
#include "store_bench.hpp"

namespace fovea {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Embedding-like vectors: a few shared directions, noise, one outlier channel.
Tensor synthetic(int64_t n, int64_t d, uint32_t seed) {
  std::mt19937 basis_rng(7), rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> basis(size_t(8 * d));
  for (float& v : basis) v = g(basis_rng);
  Tensor x(DType::f32, {n, d});
  float* p = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < 8; ++r) {
      const float c = g(rng) * 2.f / float(1 + r);
      for (int64_t k = 0; k < d; ++k) p[i * d + k] += c * basis[size_t(r * d + k)];
    }
    for (int64_t k = 0; k < d; ++k) p[i * d + k] += 0.3f * g(rng);
    p[i * d] += 20.f;
  }
  return x;
}

int64_t divisor_at_most(int64_t d, int64_t target) {
  for (int64_t m = std::max<int64_t>(1, target); m > 1; --m)
    if (d % m == 0) return m;
  return 1;
}

}  // namespace

std::vector<SeedCodec> train_seed_codecs(int64_t dim, std::vector<std::string> specs) {
  if (specs.empty())
    specs = {"fp32", "fp16", "int8", "pq:" + std::to_string(divisor_at_most(dim, dim / 8)),
             "pq:" + std::to_string(divisor_at_most(dim, dim / 16))};
  const Tensor train = synthetic(1024, dim, 1);
  std::vector<SeedCodec> out;
  for (const std::string& spec : specs) {
    SeedCodec sc{spec, nullptr};
    if (spec != "fp32") {
      sc.codec = make_codec(spec, dim);
      if (sc.codec->needs_training()) sc.codec->train(train);
    }
    out.push_back(std::move(sc));
  }
  return out;
}

std::vector<CompressedSeedRow> compressed_seed_table(std::string_view backend, StoreConfig cfg,
                                                     const std::vector<SeedCodec>& codecs, int reps) {
  const int64_t dim = cfg.dim;
  std::vector<CompressedSeedRow> rows;
  for (const SeedCodec& sc : codecs) {
    const std::string& spec = sc.spec;
    StoreConfig c = cfg;
    c.codec = sc.codec;
    if (!c.codec) c.dtype = DType::f32;
    const int64_t record = c.codec ? c.codec->bytes_per_token() : 4 * dim;
    int64_t need = 0;
    for (int64_t k : kSeedKeptTokens) need += (k * record + c.page_bytes - 1) / c.page_bytes;
    c.pool_pages = std::max(c.pool_pages, need);
    c.virtual_pages = std::max<int64_t>(c.virtual_pages, 8 * ((kSeedDenseTokens * record + c.page_bytes - 1) / c.page_bytes) + 1);
    TokenStore store(c, make_store_backend(backend));
    std::vector<TokenRange> ranges;
    for (int64_t k : kSeedKeptTokens) ranges.push_back({store.reserve(kSeedDenseTokens), 0, k});
    store.bind_batch(ranges);
    CompressedSeedRow row;
    row.codec = spec;
    row.record_bytes = record;
    std::vector<float> want;
    for (size_t i = 0; i < ranges.size(); ++i) {
      const Tensor x = synthetic(ranges[i].count, dim, uint32_t(100 + i));
      store.write(ranges[i].seq, 0, x);
      const Tensor back = c.codec ? c.codec->decode(c.codec->encode(x)) : x.clone();
      want.insert(want.end(), back.data<float>(), back.data<float>() + back.numel());
    }
    const StoreStats st = store.stats();
    row.pages = st.resident_pages;
    row.resident_bytes = st.resident_bytes;
    row.dense_fp32_bytes = 8 * kSeedDenseTokens * 4 * dim;
    row.on_device = store.decodes_on_device();
    std::vector<double> ms;
    Tensor got;
    for (int r = -1; r < std::max(reps, 1); ++r) {  // r = -1 warms up
      const auto t0 = Clock::now();
      got = store.gather_decoded(ranges);
      if (r >= 0) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    row.gather_decoded_ms = median(ms);
    row.roundtrip_ok = got.numel() == int64_t(want.size()) && std::memcmp(got.bytes(), want.data(), want.size() * 4) == 0;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace fovea
