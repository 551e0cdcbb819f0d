// The LLaVA MLP projector: projected = mm.2(GELU(mm.0(x))), one row per patch token, in fp32
// (its two GEMMs are small next to the tower). The activation is VitConfig::projector_act: the
// exact erf GELU of HF's LlavaMultiModalProjector (projector_hidden_act "gelu") unless the
// checkpoint's config says otherwise.
#include "encoder/encoder_internal.hpp"

namespace fovea::encoder_detail {

Tensor run_projector(const VitModel::Impl& m, const float* x, int64_t n, Gemm* gemm) {
  const VitConfig& c = m.config;
  auto linear = [&](const float* a, const WeightMatrix& w, const Tensor& b, Post post) {
    Tensor out(DType::f32, {n, w.rows});
    GemmArgs g = linear_args(a, DType::f32, n, w, &b, out.bytes(), DType::f32);
    g.post = post;
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
