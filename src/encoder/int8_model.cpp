// Precision::int8 at the model's level: the quantized copies of its layer matrices, and the
// LayerOps hook that runs a linear layer on them.
#include <omp.h>

#include <mutex>

#include "encoder/encoder_internal.hpp"
#include "encoder/int8.hpp"
#include "encoder/kernels.hpp"
#include "fovea/error.hpp"

namespace fovea {

bool int8_supported() { return encoder_detail::int8::best() != encoder_detail::int8::Kernel::scalar; }

namespace encoder_detail {

namespace {
std::mutex& int8_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

const int8::Layers& int8_layers(const VitModel::Impl& m) {
  std::lock_guard<std::mutex> lock(int8_mutex());
  if (m.int8_layers) return *m.int8_layers;
  std::vector<const WeightMatrix*> todo;
  for (const VitLayer& l : m.layers)
    for (const WeightMatrix* w : {&l.qkv_w, &l.out_w, &l.fc1_w, &l.fc2_w})
      if (present(*w) && w->cols <= int8::kMaxK) todo.push_back(w);
  std::vector<int8::Weight> q(todo.size());
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < todo.size(); ++i)
    q[i] = int8::quantize(todo[i]->data, todo[i]->dtype, todo[i]->cols, todo[i]->rows, todo[i]->cols);
  auto layers = std::make_shared<int8::Layers>();
  for (size_t i = 0; i < todo.size(); ++i) {
    layers->bytes += q[i].bytes();
    layers->weights.emplace(todo[i]->data, std::move(q[i]));
  }
  m.int8_layers = std::move(layers);
  return *m.int8_layers;
}

const char* int8_matrix_kernels() {
  // Facts of the CPU and the environment, asked once: so is the name.
  static const std::string s = [] {
    const char* rest = bf16_supported() ? (amx_kernels_enabled()          ? "amx+onednn"
                                           : avx512bf16_kernels_enabled() ? "avx512bf16+onednn"
                                                                          : "onednn")
                                        : (avx2_kernels_enabled() ? "avx2+onednn" : "onednn");
    return std::string("int8-") + int8::name(int8::best()) + "+" + rest;
  }();
  return s.c_str();
}

bool LayerOps::linear_int8(const GemmArgs& a) const {
  if (!a.constant_w || a.w_is_kn || a.alpha != 1.0f) return false;
  const int8::Weight* w = int8->find(a.w);
  if (!w || w->n != a.n || w->k != a.k) return false;
  int8::Args g;
  g.a = a.a, g.lda = a.lda, g.a_dt = a.a_dt;
  g.w = w;
  g.bias = a.bias;
  g.c = a.c, g.ldc = a.ldc, g.c_dt = a.c_dt;
  g.m = a.m;
  g.post = a.post;
  g.accumulate = a.accumulate;
  int8::gemm(ref ? int8::Kernel::scalar : int8::best(), g, threads);
  return true;
}

}  // namespace encoder_detail
}  // namespace fovea
