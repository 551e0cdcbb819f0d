// The encoder's per-call state (fovea::EncoderContext) and the pool the calls without one draw
// from.
#include <algorithm>
#include <mutex>

#include "encoder/attention.hpp"
#include "encoder/encoder_internal.hpp"
#include "fovea/error.hpp"

namespace fovea {

EncoderContext::EncoderContext(const EncoderContextParams& params) : impl_(std::make_unique<Impl>()) {
  impl_->params = params;
}
EncoderContext::~EncoderContext() = default;
EncoderContext::EncoderContext(EncoderContext&&) noexcept = default;
EncoderContext& EncoderContext::operator=(EncoderContext&&) noexcept = default;

const EncoderContextParams& EncoderContext::params() const { return impl_->params; }

namespace encoder_detail {

ContextUse::ContextUse(EncoderContext::Impl& ctx) : ctx_(ctx) {
  if (ctx.busy.exchange(true, std::memory_order_acquire))
    throw Error(Errc::invalid_argument,
                "encode: this EncoderContext is serving another call; give each thread its own context");
}

ContextPool::Lease::Lease(ContextPool& pool) : pool_(pool) {
  {
    std::lock_guard<std::mutex> lock(pool.mutex_);
    if (!pool.free_.empty()) {
      ctx_ = std::move(pool.free_.back());
      pool.free_.pop_back();
      return;
    }
    ++pool.made_;
    pool.free_.reserve(pool.made_);  // so that giving it back cannot fail for want of memory
  }
  ctx_ = std::make_unique<EncoderContext>();
}

ContextPool::Lease::~Lease() {
  std::lock_guard<std::mutex> lock(pool_.mutex_);
  pool_.free_.push_back(std::move(ctx_));
}

size_t ContextPool::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return made_;
}

Gemm& bind_gemm(EncoderContext::Impl& ctx, const VitModel::Impl& m, int threads) {
  if (!ctx.gemm) ctx.gemm = std::make_unique<Gemm>();
  ctx.gemm->bind(m.packed);
  ctx.gemm->pack_on_first_use(ctx.params.expect_reuse);
  ctx.gemm->set_capacity(size_t(std::max(ctx.params.max_primitives, 1)));
  ctx.gemm->reserve_threads(threads);
  return *ctx.gemm;
}

}  // namespace encoder_detail

}  // namespace fovea
