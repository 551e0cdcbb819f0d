#include "fovea/tensor.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "fovea/error.hpp"

namespace fovea {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::u8: case DType::i8: return 1;
    case DType::u16: case DType::i16: case DType::f16: case DType::bf16: return 2;
    case DType::i32: case DType::f32: return 4;
    case DType::i64: case DType::f64: return 8;
  }
  return 0;
}

namespace {
struct NamedType {
  DType type;
  std::string_view name;
};
constexpr NamedType kNames[] = {
    {DType::u8, "U8"},   {DType::i8, "I8"},   {DType::u16, "U16"},  {DType::i16, "I16"},
    {DType::i32, "I32"}, {DType::i64, "I64"}, {DType::f16, "F16"},  {DType::bf16, "BF16"},
    {DType::f32, "F32"}, {DType::f64, "F64"},
};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& n : kNames)
    if (n.type == t) return n.name;
  return "?";
}

bool dtype_from_name(std::string_view name, DType* out) {
  for (const auto& n : kNames)
    if (n.name == name) {
      *out = n.type;
      return true;
    }
  return false;
}

void AlignedFree::operator()(void* p) const noexcept { std::free(p); }

std::unique_ptr<std::byte[], AlignedFree> aligned_alloc_bytes(size_t bytes) {
  constexpr size_t kAlign = 64;
  // More than any process can map (128 TiB): a clear error, not a request the allocator may
  // not refuse cleanly (sanitizers abort on it).
  if (bytes > (size_t(1) << 47)) throw Error(Errc::out_of_memory, "cannot allocate " + std::to_string(bytes) + " bytes");
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (!p) throw Error(Errc::out_of_memory, "cannot allocate " + std::to_string(bytes) + " bytes");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Large buffers (an image level, a patch batch) are fresh mappings: with 4 KiB pages the
  // first write to each page faults, which for a 48 MiB float level costs more than the work
  // done on it. Ask for transparent huge pages, as numpy does. Only a hint.
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  if (rounded >= 2 * kHuge) {
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + rounded) & ~(kHuge - 1);
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#endif
  return std::unique_ptr<std::byte[], AlignedFree>(static_cast<std::byte*>(p));
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  int64_t elems = 1;
  for (int64_t d : shape_) {
    if (d < 0) throw Error(Errc::invalid_argument, "tensor extent must be >= 0");
    if (__builtin_mul_overflow(elems, d, &elems) || elems > (int64_t(1) << 56))
      throw Error(Errc::limit_exceeded, "tensor of more than 2^56 elements");
  }
  const size_t n = size_t(elems) * dtype_size(dtype_);  // numel() counts 0 until data_ exists
  data_ = aligned_alloc_bytes(n);
  std::memset(data_.get(), 0, n);
}

int64_t Tensor::numel() const {
  if (!data_) return 0;  // empty (default or moved-from); Tensor(dtype, {}) is a scalar
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor Tensor::clone() const {
  if (!data_) {  // empty stays empty (Tensor(dtype_, {}) would be a scalar)
    Tensor t;
    t.dtype_ = dtype_;
    return t;
  }
  Tensor t(dtype_, shape_);
  if (size_bytes()) std::memcpy(t.data_.get(), data_.get(), size_bytes());
  return t;
}

void Tensor::check_type(DType requested) const {
  if (requested == dtype_ || !data_) return;  // an empty tensor has nothing to misread
  if (requested == DType::u16 && (dtype_ == DType::f16 || dtype_ == DType::bf16)) return;  // bit patterns
  throw Error(Errc::invalid_argument, "Tensor::data<T>(): the tensor is " + std::string(dtype_name(dtype_)) +
                                          ", T is the type of " + std::string(dtype_name(requested)) +
                                          (dtype_ == DType::f16 || dtype_ == DType::bf16
                                               ? " (16-bit floats are read as uint16_t)"
                                               : ""));
}

// ---- 16-bit floats --------------------------------------------------------------------------

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> Inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    // Shift the (implicit-bit) mantissa into half's subnormal range with round-to-nearest-even.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < half of the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    const uint32_t half_m = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t r = half_m + ((rem > halfway || (rem == halfway && (half_m & 1))) ? 1 : 0);
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits (nearest even).
  uint32_t r = abs - 0x38000000u;  // exponent bias 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;  // may carry into the exponent: fine
  return static_cast<uint16_t>(sign | r);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  uint32_t x;
  if (e == 0x1f) {
    x = sign | 0x7f800000u | (m << 13);
  } else if (e != 0) {
    x = sign | ((e + 112) << 23) | (m << 13);
  } else if (m == 0) {
    x = sign;
  } else {  // subnormal: normalise
    e = 113;
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    x = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_f32(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

Tensor to_f32(Tensor raw) {
  if (raw.dtype() == DType::f32) return raw;
  Tensor out(DType::f32, raw.shape());
  float* dst = out.data<float>();
  const int64_t n = raw.numel();
  const std::byte* src = raw.bytes();
  auto read = [&](auto tag) {
    using T = decltype(tag);
    const T* s = reinterpret_cast<const T*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
  };
  switch (raw.dtype()) {
    case DType::f16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      break;
    }
    case DType::bf16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      break;
    }
    case DType::f64: read(double{}); break;
    case DType::u8: read(uint8_t{}); break;
    case DType::i8: read(int8_t{}); break;
    case DType::u16: read(uint16_t{}); break;
    case DType::i16: read(int16_t{}); break;
    case DType::i32: read(int32_t{}); break;
    case DType::i64: read(int64_t{}); break;
    case DType::f32: break;
  }
  return out;
}

}  // namespace fovea
