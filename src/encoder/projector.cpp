// The LLaVA MLP projector: projected = mm.2(GELU(mm.0(x))), one row per patch token, in fp32
// (its two GEMMs are small next to the tower). The activation is VitConfig::projector_act: the
// exact erf GELU of HF's LlavaMultiModalProjector (projector_hidden_act "gelu") unless the
// checkpoint's config says otherwise.
#include "encoder/encoder_internal.hpp"

namespace fovea::encoder_detail {

Tensor run_projector(const VitModel::Impl& m, const float* x, int64_t n, Gemm* gemm) {
  const VitConfig& c = m.config;
  auto linear = [&](const float* a, const Tensor& w, const Tensor& b, Post post) {
    Tensor out(DType::f32, {n, w.dim(0)});
    GemmArgs g{};
    g.a = a, g.lda = w.dim(1), g.a_dt = DType::f32;
    g.w = w.bytes(), g.ldw = w.dim(1), g.w_dt = DType::f32;
    g.bias = present(b) ? b.data<float>() : nullptr;
    g.c = out.bytes(), g.ldc = w.dim(0), g.c_dt = DType::f32;
    g.m = n, g.n = w.dim(0), g.k = w.dim(1);
    g.post = post;
    g.constant_w = true;
    if (gemm) gemm->run(g);
    else gemm_reference(g);
    return out;
  };
  switch (c.projector) {
    case ProjectorType::mlp: {
      Tensor h = linear(x, m.mm0_w, m.mm0_b, post_for(c.projector_act));
      if (!present(m.mm2_w)) return h;
      return linear(h.data<float>(), m.mm2_w, m.mm2_b, Post::none);
    }
    case ProjectorType::linear: return linear(x, m.mm0_w, m.mm0_b, Post::none);
    case ProjectorType::none: break;
    case ProjectorType::patch_merger: break;  // merge units, not tokens: encode_native runs it
  }
  return {};
}

}  // namespace fovea::encoder_detail
