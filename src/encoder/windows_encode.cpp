// The windows foveation's encode: every window as a standalone image, in one batched call, and
// the covered tokens dropped; several TokenBatches in one call; and the embeddings file of any
// encoding.
#include <algorithm>
#include <cstring>
#include <span>
#include <string>

#include "encoder/encoder_internal.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"

namespace fovea {

namespace {

// Rows `rows` of a [N, D] f32 tensor.
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  const int64_t d = t.dim(1);
  Tensor out(DType::f32, {int64_t(rows.size()), d});
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out.data<float>() + int64_t(i) * d, t.data<float>() + rows[i] * d, size_t(d) * 4);
  return out;
}

Tensor clone_if_present(const Tensor& t) { return t.rank() > 0 ? t.clone() : Tensor(); }

// Each window's tokens in its own pixels: cell (gx, gy) centred at ((gx + ½)·P, (gy + ½)·P), written
// to `pos` ([size, 4]); one image per window appended to `spans`.
void window_positions(const TokenBatch& batch, float* pos, std::vector<ImageSpan>& spans) {
  const int64_t n = batch.size();
  const int P = batch.patch_px;
  if (batch.window.numel() != n || batch.covered.numel() != n || batch.window.dtype() != DType::i32 ||
      batch.covered.dtype() != DType::u8)
    throw invalid_argument("encode_windows: the batch's window and covered tensors must hold one value per token");
  int64_t row = 0;
  for (const TokenWindow& w : batch.windows) {
    if (w.grid_x < 1 || w.grid_y < 1 || row + w.tokens() > n)
      throw invalid_argument("encode_windows: the batch's windows do not add up to its " + std::to_string(n) + " tokens");
    for (int64_t i = 0; i < w.tokens(); ++i, ++row) {
      pos[row * 4 + 0] = (float(i % w.grid_x) + 0.5f) * float(P);
      pos[row * 4 + 1] = (float(i / w.grid_x) + 0.5f) * float(P);
      pos[row * 4 + 2] = float(P);
      pos[row * 4 + 3] = 0;
    }
    spans.push_back({w.tokens(), w.grid_x * P, w.grid_y * P});
  }
  if (row != n) throw invalid_argument("encode_windows: the batch's windows do not add up to its " + std::to_string(n) + " tokens");
}

// A windowed batch's encoding from its windows' (`per`, window order): the kept rows stacked,
// the base view's class token and heads, every window's class token.
Encoding assemble_windows(const TokenBatch& batch, std::span<Encoding> per) {
  const int64_t n = batch.size();
  Encoding e;
  const uint8_t* cov = batch.covered.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i)
    if (!cov[i]) e.rows.push_back(i);
  // The windows' rows side by side, then the kept ones.
  auto stack = [&](Tensor Encoding::*field) {
    if ((per.front().*field).rank() == 0) return Tensor();
    const int64_t d = (per.front().*field).dim(1);
    Tensor all(DType::f32, {n, d});
    int64_t r = 0;
    for (const Encoding& x : per) {
      std::memcpy(all.data<float>() + r * d, (x.*field).data<float>(), size_t((x.*field).numel()) * 4);
      r += (x.*field).dim(0);
    }
    return gather_rows(all, e.rows);
  };
  e.embeddings = stack(&Encoding::embeddings);
  e.projected = stack(&Encoding::projected);
  Encoding& base = per.front();
  e.class_token = std::move(base.class_token);
  e.pooled = std::move(base.pooled);
  e.image_embeds = std::move(base.image_embeds);
  e.logits = std::move(base.logits);
  if (e.class_token.rank() > 0) {
    const int64_t d = e.class_token.dim(1);
    e.window_class_tokens = Tensor(DType::f32, {int64_t(per.size()), d});
    std::memcpy(e.window_class_tokens.data<float>(), e.class_token.data<float>(), size_t(d) * 4);
    for (size_t w = 1; w < per.size(); ++w)
      std::memcpy(e.window_class_tokens.data<float>() + int64_t(w) * d, per[w].class_token.data<float>(), size_t(d) * 4);
  }
  e.precision = base.precision;
  e.encode_ms = base.encode_ms;
  e.attention_ms = base.attention_ms;
  return e;
}

}  // namespace

Foveation default_foveation(const VitModel& model) {
  return model.is_random() ? Foveation::mixed : Foveation::windows;
}

std::vector<Encoding> encode_tokens_batch(EncoderContext& ctx, const VitModel& model,
                                          std::span<const TokenBatchImage> images, const EncodeParams& params,
                                          Executor& exec) {
  std::vector<Encoding> out;
  if (images.empty()) return out;
  int64_t n = 0;
  for (const TokenBatchImage& im : images) {
    if (!im.batch) throw invalid_argument("encode_tokens_batch: a null batch");
    const Tensor& p = im.batch->patches;
    if (p.rank() != 4 || p.dim(0) < 1) throw invalid_argument("encode: patches must be [N, C, P, P] with N >= 1");
    const Tensor& p0 = images.front().batch->patches;
    if (p.dtype() != p0.dtype() || !std::equal(p.shape().begin() + 1, p.shape().end(), p0.shape().begin() + 1))
      throw invalid_argument("encode_tokens_batch: every batch must hold patches of one dtype and one size");
    n += p.dim(0);
  }
  // Every row's position in its own image's pixels: a plain batch's as they are (in an image of
  // image_width × image_height), a windowed batch's in its window.
  Tensor local(DType::f32, {n, 4});
  float* lp = local.data<float>();
  std::vector<ImageSpan> spans;
  std::vector<size_t> first_span;  // per batch: its first image in `spans`
  int64_t row = 0;
  for (const TokenBatchImage& im : images) {
    const TokenBatch& b = *im.batch;
    first_span.push_back(spans.size());
    if (b.windowed()) {
      window_positions(b, lp + row * 4, spans);
    } else {
      if (b.size() && (b.positions.dtype() != DType::f32 || b.positions.numel() != b.size() * 4))
        throw invalid_argument("encode: positions must be [N, 4] float32 with N = " + std::to_string(b.size()));
      if (b.size()) std::memcpy(lp + row * 4, b.positions.data<float>(), size_t(b.size()) * 16);
      spans.push_back({b.size(), im.image_width, im.image_height});
    }
    row += b.size();
  }
  first_span.push_back(spans.size());
  // One batch is read in place; several are put one after another.
  Tensor joined;
  if (images.size() > 1) {
    std::vector<int64_t> shape = images.front().batch->patches.shape();
    shape[0] = n;
    joined = Tensor(images.front().batch->patches.dtype(), shape);
    size_t at = 0;
    for (const TokenBatchImage& im : images) {
      std::memcpy(joined.bytes() + at, im.batch->patches.bytes(), im.batch->patches.size_bytes());
      at += im.batch->patches.size_bytes();
    }
  }
  std::vector<Encoding> per = encode_batch(ctx, model, images.size() > 1 ? TensorView(joined) : TensorView(images.front().batch->patches),
                                           TensorView(local), spans, params, exec);
  for (size_t k = 0; k < images.size(); ++k) {
    const size_t s0 = first_span[k], s1 = first_span[k + 1];
    if (images[k].batch->windowed())
      out.push_back(assemble_windows(*images[k].batch, std::span<Encoding>(per).subspan(s0, s1 - s0)));
    else
      out.push_back(std::move(per[s0]));
  }
  return out;
}

std::vector<Encoding> encode_tokens_batch(const VitModel& model, std::span<const TokenBatchImage> images,
                                          const EncodeParams& params, Executor& exec) {
  encoder_detail::ContextPool::Lease lease = model.impl().contexts.take();
  return encode_tokens_batch(lease.context(), model, images, params, exec);
}

Encoding encode_windows(EncoderContext& ctx, const VitModel& model, const TokenBatch& batch, const EncodeParams& params,
                        Executor& exec) {
  if (!batch.windowed())
    throw invalid_argument("encode_windows: the batch has no windows (tokenize with the windows foveation)");
  const TokenBatchImage one{&batch};
  return std::move(encode_tokens_batch(ctx, model, std::span(&one, 1), params, exec).front());
}

Encoding encode_windows(const VitModel& model, const TokenBatch& batch, const EncodeParams& params, Executor& exec) {
  encoder_detail::ContextPool::Lease lease = model.impl().contexts.take();
  return encode_windows(lease.context(), model, batch, params, exec);
}

Encoding encode_tokens(EncoderContext& ctx, const VitModel& model, const TokenBatch& batch, const EncodeParams& params,
                       Executor& exec) {
  if (batch.windowed()) return encode_windows(ctx, model, batch, params, exec);
  return encode(ctx, model, TensorView(batch.patches), TensorView(batch.positions), params, exec);
}

Encoding encode_tokens(const VitModel& model, const TokenBatch& batch, const EncodeParams& params, Executor& exec) {
  encoder_detail::ContextPool::Lease lease = model.impl().contexts.take();
  return encode_tokens(lease.context(), model, batch, params, exec);
}

EmbeddingsFile embeddings_file(const TokenBatch& batch, const Encoding& e, std::map<std::string, std::string> metadata) {
  EmbeddingsFile f;
  f.metadata = std::move(metadata);
  f.embeddings = e.embeddings.clone();
  f.projected = clone_if_present(e.projected);
  f.class_token = clone_if_present(e.class_token);
  f.pooled = clone_if_present(e.pooled);
  f.image_embeds = clone_if_present(e.image_embeds);
  f.logits = clone_if_present(e.logits);
  if (!batch.windowed()) {
    f.positions = batch.positions.clone();
    f.levels = batch.levels.clone();
    return f;
  }
  std::vector<int64_t> rows = e.rows;
  if (rows.empty() && e.embeddings.rank() == 2 && e.embeddings.dim(0) == batch.size())
    for (int64_t i = 0; i < batch.size(); ++i) rows.push_back(i);
  const int64_t k = int64_t(rows.size());
  f.positions = Tensor(DType::f32, {k, 4});
  f.levels = Tensor(DType::i32, {k});
  Tensor window(DType::i32, {k});
  for (int64_t i = 0; i < k; ++i) {
    const int64_t r = rows[size_t(i)];
    if (r < 0 || r >= batch.size()) throw invalid_argument("embeddings_file: the encoding's rows are not the batch's");
    std::memcpy(f.positions.data<float>() + i * 4, batch.positions.data<float>() + r * 4, 16);
    f.levels.data<int32_t>()[i] = batch.levels.data<int32_t>()[r];
    window.data<int32_t>()[i] = batch.window.data<int32_t>()[r];
  }
  f.extra.emplace("window", std::move(window));
  for (auto& [name, t] : window_tensors_of(batch.windows)) f.extra.emplace(name, std::move(t));
  if (e.window_class_tokens.rank() > 0) f.extra.emplace("window_class_tokens", e.window_class_tokens.clone());
  return f;
}

}  // namespace fovea
