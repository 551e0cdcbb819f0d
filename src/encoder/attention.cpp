// Multi-head attention (attention.hpp), flash-style: (head, 128-query block) tasks run in
// parallel, each walking 512-key blocks with an online softmax, so no T×T matrix exists (the
// working set per thread is a Bq×Bk score block). The reference runs the same algorithm with the
// scalar kernels and a single key block (plain softmax attention).
#include "encoder/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "fovea/error.hpp"

namespace fovea::encoder_detail {

namespace {

size_t esize(DType t) { return t == DType::f32 ? 4 : 2; }

// A growable 64-byte aligned scratch buffer.
struct Buf {
  std::unique_ptr<std::byte[], AlignedFree> p;
  size_t bytes = 0;
  void ensure(size_t n) {
    if (n > bytes) {
      p = aligned_alloc_bytes(std::max<size_t>(n, 64));
      bytes = std::max<size_t>(n, 64);
    }
  }
  std::byte* get() { return p.get(); }
  template <typename T> T* as() { return reinterpret_cast<T*>(p.get()); }
};

void linear(const AttentionExec& ex, const GemmArgs& a) {
  if (ex.reference) gemm_reference(a);
  else ex.gemm->run(a);
}

}  // namespace

// Attention of r query rows (q, row stride ldq, heads contiguous) against T keys and values
// (kv: K at column 0, V at column D, row stride ldkv) into out [r, D], flash-style.
void attention_rows(const AttentionExec& ops, const std::byte* q, int64_t ldq, int64_t r, const std::byte* kv, int64_t ldkv,
                    int64_t T, int64_t D, int heads, DType dt, std::byte* out) {
  const int64_t hd = D / heads;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const int64_t Bq = ops.reference ? r : std::min<int64_t>(r, 128);
  const int64_t Bk = ops.reference ? T : std::min<int64_t>(T, 512);
  const int64_t nqb = (r + Bq - 1) / Bq;
  const int64_t tasks = nqb * heads;
  const size_t es = esize(dt);
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(ops.threads)
  {
    Buf S, P, O;
    S.ensure(size_t(Bq * Bk) * 4), P.ensure(size_t(Bq * Bk) * es), O.ensure(size_t(Bq * hd) * 4);
    std::vector<float> m(Bq), l(Bq);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      try {
        const int64_t h = task % heads, q0 = (task / heads) * Bq, bq = std::min(Bq, r - q0);
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.0f);
        std::memset(O.get(), 0, size_t(bq * hd) * 4);
        for (int64_t k0 = 0; k0 < T; k0 += Bk) {
          const int64_t bk = std::min(Bk, T - k0);
          GemmArgs s{};
          s.a = q + size_t(q0 * ldq + h * hd) * es, s.lda = ldq, s.a_dt = dt;
          s.w = kv + size_t(k0 * ldkv + h * hd) * es, s.ldw = ldkv, s.w_dt = dt;
          s.c = S.get(), s.ldc = bk, s.c_dt = DType::f32;
          s.m = bq, s.n = bk, s.k = hd;
          linear(ops, s);
          for (int64_t i = 0; i < bq; ++i) {
            void* prow = P.get() + size_t(i * bk) * es;
            const float corr = ops.reference ? softmax_step_row_ref(S.as<float>() + i * bk, bk, scale, &m[i], &l[i], prow, dt)
                                       : softmax_step_row(S.as<float>() + i * bk, bk, scale, &m[i], &l[i], prow, dt);
            if (corr != 1.0f) {
              float* o = O.as<float>() + i * hd;
              for (int64_t j = 0; j < hd; ++j) o[j] *= corr;
            }
          }
          GemmArgs pv{};
          pv.a = P.get(), pv.lda = bk, pv.a_dt = dt;
          pv.w = kv + size_t(k0 * ldkv + D + h * hd) * es, pv.ldw = ldkv, pv.w_dt = dt, pv.w_is_kn = true;
          pv.c = O.get(), pv.ldc = hd, pv.c_dt = DType::f32;
          pv.m = bq, pv.n = hd, pv.k = bk;
          pv.accumulate = true;
          linear(ops, pv);
        }
        for (int64_t i = 0; i < bq; ++i) {
          const float inv = 1.0f / l[i];
          const float* o = O.as<float>() + i * hd;
          if (dt == DType::f32) {
            float* dst = reinterpret_cast<float*>(out) + (q0 + i) * D + h * hd;
            for (int64_t j = 0; j < hd; ++j) dst[j] = o[j] * inv;
          } else {
            uint16_t* dst = reinterpret_cast<uint16_t*>(out) + (q0 + i) * D + h * hd;
            for (int64_t j = 0; j < hd; ++j) dst[j] = f32_to_bf16(o[j] * inv);
          }
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace fovea::encoder_detail
