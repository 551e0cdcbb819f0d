// fovea/tensor.hpp — a dense, row-major, move-only n-d array with a runtime dtype.
//
//   int64_t n = 273;
//   fovea::Tensor t(fovea::DType::f32, {n, 4});      // zero-filled, 64-byte aligned
//   float* p = t.data<float>();                      // checked: dtype must be f32
//   fovea::Tensor copy = t.clone();                  // copies are explicit
//
// It is the unit that crosses stage boundaries and files: safetensors reads and writes it,
// extraction fills it, the encoder consumes it.
//
// Thread safety: a Tensor is a plain value. Concurrent reads (const methods, reading the
// data) are safe; writing one from a thread while others use it is not.
#pragma once
#include "fovea/export.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

FOVEA_API_BEGIN
namespace fovea {

enum class DType : uint8_t { u8, i8, u16, i16, i32, i64, f16, bf16, f32, f64 };

size_t dtype_size(DType t);
// safetensors spelling: "U8", "I32", "F16", "BF16", "F32", ...
std::string_view dtype_name(DType t);
// Inverse of dtype_name; returns false for names fovea does not know.
bool dtype_from_name(std::string_view name, DType* out);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<int16_t>() { return DType::i16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }

struct AlignedFree {
  void operator()(void* p) const noexcept;
};
// 64-byte aligned, uninitialised storage; throws fovea::Error(out_of_memory) on failure.
std::unique_ptr<std::byte[], AlignedFree> aligned_alloc_bytes(size_t bytes);

class Tensor {
 public:
  // Empty: holds nothing (rank 0, numel() 0, bytes() == nullptr). A rank-0 tensor made with
  // an empty shape, Tensor(dtype, {}), is a scalar instead: numel() 1.
  Tensor() = default;
  // Zero-filled. Every extent must be >= 0.
  Tensor(DType dtype, std::vector<int64_t> shape);
  Tensor(const Tensor&) = delete;  // copies of large buffers are explicit: clone()
  Tensor& operator=(const Tensor&) = delete;
  // A moved-from tensor is empty, as a default one.
  Tensor(Tensor&& other) noexcept { *this = std::move(other); }
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      dtype_ = other.dtype_;
      shape_ = std::exchange(other.shape_, {});
      data_ = std::move(other.data_);
    }
    return *this;
  }

  Tensor clone() const;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const;
  size_t size_bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return numel() == 0; }

  std::byte* bytes() { return data_.get(); }
  const std::byte* bytes() const { return data_.get(); }
  std::span<const std::byte> byte_span() const { return {data_.get(), size_bytes()}; }

  // Typed access, checked: T must be the dtype's C++ type (dtype_of<T>() == dtype()), or
  // Error(invalid_argument) is thrown naming both; a T with no dtype does not compile. C++
  // has no standard 16-bit float type, so F16 and BF16 tensors are read and written as their
  // bit patterns through uint16_t (convert with f16_to_f32 / bf16_to_f32 below); uint16_t
  // also reads U16. Every other dtype takes its own type only (int32_t is not float, uint8_t
  // is not int8_t). An empty tensor (default or moved-from) returns nullptr for any T. bytes()
  // is the unchecked raw access.
  template <typename T> T* data() {
    check_type(dtype_of<T>());
    return reinterpret_cast<T*>(data_.get());
  }
  template <typename T> const T* data() const {
    check_type(dtype_of<T>());
    return reinterpret_cast<const T*>(data_.get());
  }

 private:
  void check_type(DType requested) const;

  DType dtype_ = DType::f32;
  std::vector<int64_t> shape_;
  std::unique_ptr<std::byte[], AlignedFree> data_;
};

// IEEE binary16 and bfloat16 conversions, round to nearest even (NaN stays NaN).
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// `t` converted to float32, same shape (an f32 tensor is returned as it is, moved).
Tensor to_f32(Tensor t);

}  // namespace fovea
FOVEA_API_END
