// Dequantisation of ggml's block formats (GgufFile::load_f32), after ggml's block layouts
// (ggml-common.h) and the GGUF spec: each row of a tensor is a sequence of blocks of 32 (Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0) or 256 (the k-quants) values. Scales are little-endian f16 (f32 in
// Q8_K). scripts/make_gguf_quant_fixtures.py is the numpy reference the tests compare with.
#include <cstdint>
#include <cstring>

#include "fovea/gguf.hpp"
#include "fovea/tensor.hpp"

namespace fovea {

namespace {

inline float h16(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
inline uint8_t u8(const std::byte* p, int i) { return static_cast<uint8_t>(p[i]); }

// Q4_K / Q5_K: eight 6-bit scales and eight 6-bit mins packed in 12 bytes.
inline void scale_min_k4(int j, const std::byte* q, int* d, int* m) {
  if (j < 4) {
    *d = u8(q, j) & 63;
    *m = u8(q, j + 4) & 63;
  } else {
    *d = (u8(q, j + 4) & 0xF) | ((u8(q, j - 4) >> 6) << 4);
    *m = (u8(q, j + 4) >> 4) | ((u8(q, j) >> 6) << 4);
  }
}

// n F16 values into f32 without branches (the bit manipulation of Maratos' FP16 library: exact
// for every value, subnormals, infinities and NaN included), so the loop vectorizes: loading an
// F16 mmproj converts hundreds of millions of them, and the scalar f16_to_f32 per value took
// ~5 % of a one-shot ViT-L/14 encode.
void f16_row(const std::byte* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const uint32_t w = uint32_t(h) << 16, sign = w & 0x80000000u, two_w = w + w;
    uint32_t nb = (two_w >> 4) + (0xE0u << 23), db = (two_w >> 17) | (126u << 23);
    float normalized, denormalized;
    std::memcpy(&normalized, &nb, 4);
    std::memcpy(&denormalized, &db, 4);
    normalized *= 0x1.0p-112f;     // rebias the exponent (inf and NaN stay so)
    denormalized -= 0.5f;          // subnormal halves: m·2^-24 exactly
    std::memcpy(&nb, &normalized, 4);
    std::memcpy(&db, &denormalized, 4);
    const uint32_t r = sign | (two_w < (1u << 27) ? db : nb);
    std::memcpy(dst + i, &r, 4);
  }
}

// One block at `b` into y (32 or 256 values).
void block_q4_0(const std::byte* b, float* y) {  // f16 d, 16 bytes of nibbles: value = d·(q − 8)
  const float d = h16(b);
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = u8(b, 2 + j);
    y[j] = float(int(q & 0xF) - 8) * d;
    y[j + 16] = float(int(q >> 4) - 8) * d;
  }
}
void block_q4_1(const std::byte* b, float* y) {  // f16 d, f16 m, nibbles: value = d·q + m
  const float d = h16(b), m = h16(b + 2);
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = u8(b, 4 + j);
    y[j] = float(q & 0xF) * d + m;
    y[j + 16] = float(q >> 4) * d + m;
  }
}
void block_q5_0(const std::byte* b, float* y) {  // f16 d, 32 high bits, nibbles: value = d·(q − 16)
  const float d = h16(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = u8(b, 6 + j);
    const int h0 = int((qh >> j) << 4 & 0x10), h1 = int((qh >> (j + 12)) & 0x10);
    y[j] = float(int((q & 0xF) | h0) - 16) * d;
    y[j + 16] = float(int((q >> 4) | h1) - 16) * d;
  }
}
void block_q5_1(const std::byte* b, float* y) {  // f16 d, f16 m, 32 high bits, nibbles: d·q + m
  const float d = h16(b), m = h16(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = u8(b, 8 + j);
    const int h0 = int((qh >> j) << 4 & 0x10), h1 = int((qh >> (j + 12)) & 0x10);
    y[j] = float((q & 0xF) | h0) * d + m;
    y[j + 16] = float((q >> 4) | h1) * d + m;
  }
}
void block_q8_0(const std::byte* b, float* y) {  // f16 d, 32 int8: value = d·q
  const float d = h16(b);
  for (int j = 0; j < 32; ++j) y[j] = d * float(static_cast<int8_t>(b[2 + j]));
}
void block_q4_k(const std::byte* b, float* y) {
  // f16 d, f16 dmin, 12 bytes of scales and mins, 128 bytes of nibbles. Each 64 values: the low
  // nibbles of 32 bytes (sub-block 2i), then their high nibbles (2i + 1); value = d·sc·q − dmin·m.
  const float d = h16(b), dmin = h16(b + 2);
  const std::byte* sc = b + 4;
  const std::byte* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    int s1, m1, s2, m2;
    scale_min_k4(is, sc, &s1, &m1);
    scale_min_k4(is + 1, sc, &s2, &m2);
    const float d1 = d * float(s1), n1 = dmin * float(m1), d2 = d * float(s2), n2 = dmin * float(m2);
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * float(u8(q, l) & 0xF) - n1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * float(u8(q, l) >> 4) - n2;
  }
}
void block_q5_k(const std::byte* b, float* y) {
  // As Q4_K with a fifth bit per value: 32 bytes qh before the nibbles; bit 2i (2i + 1) of
  // qh[l] is the high bit of sub-block 2i's (2i + 1's) value l.
  const float d = h16(b), dmin = h16(b + 2);
  const std::byte* sc = b + 4;
  const std::byte* qh = b + 16;
  const std::byte* q = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32, u1 = uint8_t(u1 << 2), u2 = uint8_t(u2 << 2)) {
    int s1, m1, s2, m2;
    scale_min_k4(is, sc, &s1, &m1);
    scale_min_k4(is + 1, sc, &s2, &m2);
    const float d1 = d * float(s1), n1 = dmin * float(m1), d2 = d * float(s2), n2 = dmin * float(m2);
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * float((u8(q, l) & 0xF) + (u8(qh, l) & u1 ? 16 : 0)) - n1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * float((u8(q, l) >> 4) + (u8(qh, l) & u2 ? 16 : 0)) - n2;
  }
}
void block_q6_k(const std::byte* b, float* y) {
  // 128 bytes low nibbles (ql), 64 bytes of 2-bit highs (qh), 16 int8 scales, f16 d. Per half
  // of 128 values: value l (+32, +64, +96) = d·sc·(6-bit q − 32).
  const std::byte* ql = b;
  const std::byte* qh = b + 128;
  const std::byte* sc = b + 192;
  const float d = h16(b + 208);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((u8(ql, l) & 0xF) | ((u8(qh, l) >> 0 & 3) << 4)) - 32;
      const int q2 = int((u8(ql, l + 32) & 0xF) | ((u8(qh, l) >> 2 & 3) << 4)) - 32;
      const int q3 = int((u8(ql, l) >> 4) | ((u8(qh, l) >> 4 & 3) << 4)) - 32;
      const int q4 = int((u8(ql, l + 32) >> 4) | ((u8(qh, l) >> 6 & 3) << 4)) - 32;
      auto s = [&](int i) { return float(static_cast<int8_t>(sc[i])); };
      y[n + l] = d * s(is) * float(q1);
      y[n + l + 32] = d * s(is + 2) * float(q2);
      y[n + l + 64] = d * s(is + 4) * float(q3);
      y[n + l + 96] = d * s(is + 6) * float(q4);
    }
  }
}
void block_q8_k(const std::byte* b, float* y) {  // f32 d, 256 int8, 16 int16 block sums (unused)
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < 256; ++j) y[j] = d * float(static_cast<int8_t>(b[4 + j]));
}

}  // namespace

bool ggml_dequantize(uint32_t type, const std::byte* src, int64_t n, float* dst) {
  void (*fn)(const std::byte*, float*) = nullptr;
  int block = 0, bytes = 0;
  switch (GgmlType(type)) {
    case GgmlType::f16: f16_row(src, dst, n); return true;
    case GgmlType::q4_0: fn = block_q4_0, block = 32, bytes = 18; break;
    case GgmlType::q4_1: fn = block_q4_1, block = 32, bytes = 20; break;
    case GgmlType::q5_0: fn = block_q5_0, block = 32, bytes = 22; break;
    case GgmlType::q5_1: fn = block_q5_1, block = 32, bytes = 24; break;
    case GgmlType::q8_0: fn = block_q8_0, block = 32, bytes = 34; break;
    case GgmlType::q4_k: fn = block_q4_k, block = 256, bytes = 144; break;
    case GgmlType::q5_k: fn = block_q5_k, block = 256, bytes = 176; break;
    case GgmlType::q6_k: fn = block_q6_k, block = 256, bytes = 210; break;
    case GgmlType::q8_k: fn = block_q8_k, block = 256, bytes = 292; break;
    default: return false;
  }
  const int64_t blocks = n / block;
  for (int64_t i = 0; i < blocks; ++i) fn(src + i * bytes, dst + i * block);
  return true;
}

}  // namespace fovea
