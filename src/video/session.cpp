// VideoSession: the per-frame pipeline with reuse (see fovea/video.hpp for the contract).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "extract/batch.hpp"
#include "fovea/error.hpp"
#include "fovea/video.hpp"
#include "video/frame_state.hpp"
#include "video/windows_session.hpp"

namespace fovea {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

using video_detail::copy_tiles;
using video_detail::same_query;

}  // namespace

std::string_view to_string(Reuse r) {
  switch (r) {
    case Reuse::off: return "off";
    case Reuse::exact: return "exact";
    case Reuse::incremental: return "incremental";
  }
  return "?";
}

struct VideoSession::Impl {
  VideoParams params;
  const VitModel* model = nullptr;
  Executor& exec;
  std::unique_ptr<IncrementalEncoder> encoder;
  std::unique_ptr<video_detail::WindowsVideo> windows;  // the windows foveation (windows_session.hpp)
  double last_drift = 0;  // the last encoded frame's drift estimate
  bool last_refresh = false;  // the last encoded frame was a refresh
  // Heavy change (VideoParams::exact_above_work): tracking the change of a group whose encode
  // did most of a full encode's work costs more than a full encode (the small GEMMs of the
  // recomputed rows and the attention bound's updates run below a full encode's efficiency), so
  // the next kExactGroups groups are encoded exactly, and then reuse is tried again.
  // Reuse is tried again only once the frames change less than they did in the group that was
  // found too costly (the share of tokens whose patch was sampled again): while the motion that
  // made reuse costly goes on (a sprite growing at the fixation), a retry would pay a tracked
  // full encode and more heavy groups for nothing, so the exact groups go on.
  static constexpr int kExactGroups = 3;
  int exact_groups_left = 0;
  double heavy_resample = 0;  // the costly group's mean share of resampled tokens (0: none yet)
  int64_t processed = 0;
  PyramidU8 pyramid;
  TileGrid grid;
  std::shared_ptr<const Allocation> allocation = std::make_shared<const Allocation>();
  bool have_layout = false;
  RelevanceCache relevance_cache;        // the reference pyramid's detail energies
  std::vector<float> layout_relevance;  // the scores the current layout was allocated from
  Query layout_query;
  TokenBatch batch;                      // the previous frame's tokens
  // Per level, per node of the level's token grid: the token's row in `batch`, or -1.
  std::vector<std::vector<int32_t>> rows;
  // Frames through the front end whose encoder work waits for the rest of their group.
  struct Pending {
    FrameResult r;
    std::vector<uint8_t> resample;  // [N] 1: the token's patch was sampled again
    bool had_layout = false;        // previous_row refers to the previous frame's rows
    // A camera shift by whole patches (a refresh of the layout and of every layer): the tokens
    // whose patch is, byte for byte, a patch of the previous frame keep its patch embedding.
    bool shift = false;
    int width = 0, height = 0;      // the frame's size (a later refresh may change the session's)
  };
  ImageU8 recycled;  // the last pushed frame's buffer, for the caller's next read
  std::vector<Pending> pending;

  int group_size() const { return encoder && params.reuse == Reuse::incremental ? params.group_frames : 1; }
  // The previous frame's patches, which the next frame's clean tokens copy: the last pending
  // frame's own (handed over, not copied, when it passed the front end), else the session's
  // copy of the last frame that left (`batch.patches`, refreshed once per group).
  const Tensor& previous_patches() const { return pending.empty() ? batch.patches : pending.back().r.batch.patches; }
  // The front end of one frame (change test, pyramid, relevance, layout, patches), step by step
  // over the state the steps hand on.
  struct FrontFrame {
    Pending out;                    // the frame's result so far
    std::vector<uint8_t> dirty;     // per tile of the grid: 1 when it changed
    bool size_changed = false;
    int shift_x = 0, shift_y = 0;   // a camera shift by whole patches: frame(x, y) = previous(x + shift_x, y + shift_y)
    bool shifted = false;
    int relevance_levels = 0;       // the relevance cache's levels before the pyramid's update
    PyramidDirty pd;                // the pyramid nodes the update changed
    bool had_layout = false;        // the previous layout's rows apply to this frame
    std::vector<uint8_t> resample;  // [N] 1: the token's patch is sampled again
    TokenBatch batch;               // the frame's patches
  };
  Pending front(ImageU8 frame, const Query& query, int64_t index, double pts_s);
  void detect_change(const ImageU8& frame, FrontFrame& f);
  void update_frame_pyramid(ImageU8 frame, FrontFrame& f);
  RelevanceMap frame_relevance(const Query& query, FrontFrame& f);
  void place_tokens(const RelevanceMap& rel, const Query& query, FrontFrame& f);
  void extract_patches(FrontFrame& f);
  void reuse_shifted_patches(FrontFrame& f);
  Pending keep_state(FrontFrame& f);
  std::vector<FrameResult> encode_pending();
  // The pending frames' mean share of tokens whose patch was sampled again.
  double resample_share() const {
    double sum = 0;
    for (const Pending& q : pending)
      if (!q.resample.empty())
        sum += double(std::count(q.resample.begin(), q.resample.end(), uint8_t(1))) / double(q.resample.size());
    return pending.empty() ? 0.0 : sum / double(pending.size());
  }

  Impl(const VideoParams& p, const VitModel* m, Executor& e) : params(p), model(m), exec(e) {}

  void index_rows() {
    const int L = allocation->layout.num_levels();
    rows.assign(size_t(L), {});
    for (int l = 0; l < L; ++l) rows[size_t(l)].assign(size_t(grid.tiles_at(l)), -1);
    for (size_t i = 0; i < allocation->layout.tokens.size(); ++i) {
      const Token& t = allocation->layout.tokens[i];
      rows[size_t(t.level)][size_t(t.y) * grid.tiles_x_at(t.level) + t.x] = int32_t(i);
    }
  }
  int32_t row_of(const Token& t) const {
    if (t.level >= int(rows.size())) return -1;
    return rows[size_t(t.level)][size_t(t.y) * grid.tiles_x_at(t.level) + t.x];
  }
};

VideoSession::VideoSession(const VideoParams& params, const VitModel* model, Executor& exec)
    : impl_(std::make_unique<Impl>(params, model, exec)) {
  const VideoParams& p = params;
  if (p.tokenize.uniform) throw Error(Errc::invalid_argument, "video: the uniform baseline has no incremental mode");
  if (p.tokenize.alloc.budget_tokens < 1) throw Error(Errc::invalid_argument, "video: the budget must be >= 1 token");
  if (!(p.change_threshold >= 0) || !std::isfinite(p.change_threshold))
    throw Error(Errc::invalid_argument, "video: the change threshold must be a finite number >= 0");
  if (!(p.refresh_fraction > 0 && p.refresh_fraction <= 1))
    throw Error(Errc::invalid_argument, "video: the refresh fraction must be in (0, 1]");
  if (p.group_frames < 1 || p.group_frames > 1024)
    throw Error(Errc::invalid_argument, "video: the frame group must be 1..1024 frames");
  if (p.keyframe_interval < 0) throw Error(Errc::invalid_argument, "video: the keyframe interval must be >= 0");
  if (!(p.layout_hysteresis >= 0)) throw Error(Errc::invalid_argument, "video: the layout hysteresis must be >= 0");
  if (!(p.encoder.token_threshold >= 0) || !std::isfinite(p.encoder.token_threshold))
    throw Error(Errc::invalid_argument, "video: the token threshold must be a finite number >= 0");
  if (std::isnan(p.encoder.mlp_threshold)) throw Error(Errc::invalid_argument, "video: the MLP threshold must be a number");
  if (std::isnan(p.encoder.attention_threshold))
    throw Error(Errc::invalid_argument, "video: the attention threshold must be a number");
  if (p.encoder.refresh_tokens < 0) throw Error(Errc::invalid_argument, "video: the refresh budget must be >= 0");
  if (!(p.exact_above_work >= 0) || !std::isfinite(p.exact_above_work))
    throw Error(Errc::invalid_argument, "video: the exact-above-work share must be a finite number >= 0");
  if (!(p.drift_refresh >= 0) || !std::isfinite(p.drift_refresh))
    throw Error(Errc::invalid_argument, "video: the drift refresh bound must be a finite number >= 0");
  check_extract_params(p.tokenize.extract);
  if (model) {
    if (model->config().patch_px != p.tokenize.patch_px)
      throw Error(Errc::invalid_argument, "video: patch size " + std::to_string(p.tokenize.patch_px) +
                                              " does not match the model's " +
                                              std::to_string(model->config().patch_px));
    if (p.tokenize.extract.dtype == DType::u8)
      throw Error(Errc::invalid_argument, "video: u8 patches are not normalised; a model needs f32 or f16");
    if (p.tokenize.foveation != Foveation::windows) impl_->encoder = std::make_unique<IncrementalEncoder>(*model);
  }
  if (p.tokenize.foveation == Foveation::windows)
    impl_->windows = std::make_unique<video_detail::WindowsVideo>(params, model, exec);
}

VideoSession::~VideoSession() = default;
const PyramidU8& VideoSession::pyramid() const { return impl_->windows ? impl_->windows->pyramid() : impl_->pyramid; }
const Allocation& VideoSession::allocation() const {
  return impl_->windows ? impl_->windows->allocation() : *impl_->allocation;
}
const VideoParams& VideoSession::params() const { return impl_->params; }
const VitModel* VideoSession::model() const { return impl_->model; }

FrameResult VideoSession::process(ImageU8 frame, const Query& query, int64_t index, double pts_s) {
  if (!impl_->pending.empty())
    throw Error(Errc::invalid_argument, "video: process() after push() with frames pending: flush() first");
  std::vector<FrameResult> out = push(std::move(frame), query, index, pts_s);
  ImageU8 recycled = std::move(impl_->recycled);
  if (out.empty()) out = flush();
  FrameResult r = std::move(out.front());
  r.recycled = std::move(recycled);
  return r;
}

std::vector<FrameResult> VideoSession::push(ImageU8 frame, const Query& query, int64_t index, double pts_s,
                                            ImageU8* recycled) {
  Impl& s = *impl_;
  if (s.windows) {  // every frame encoded at once: its changed windows are one batch already
    std::vector<FrameResult> out;
    out.push_back(s.windows->process(std::move(frame), query, index, pts_s));
    (recycled ? *recycled : s.recycled) = s.windows->take_recycled();
    return out;
  }
  Impl::Pending pf = s.front(std::move(frame), query, index, pts_s);
  if (recycled) *recycled = std::move(s.recycled);
  std::vector<FrameResult> out;
  // A refresh (a full encode, which resets the encoder) is a group of its own: the frames
  // before it are encoded first, and it goes through at once. Its 'all rows' GEMMs already
  // read every weight for hundreds of rows; grouping it would only delay the frames after it.
  const bool refresh = pf.r.refresh;
  if (refresh && !s.pending.empty()) out = s.encode_pending();
  s.pending.push_back(std::move(pf));
  if (refresh || int(s.pending.size()) >= s.group_size()) {
    std::vector<FrameResult> more = s.encode_pending();
    for (FrameResult& r : more) out.push_back(std::move(r));
  }
  return out;
}

std::vector<FrameResult> VideoSession::flush() { return impl_->encode_pending(); }
int64_t VideoSession::pending_frames() const { return int64_t(impl_->pending.size()); }

std::vector<FrameResult> VideoSession::Impl::encode_pending() {
  std::vector<FrameResult> out;
  if (pending.empty()) return out;
  const auto t0 = Clock::now();
  if (encoder) {
    IncrementalParams ep = params.encoder;
    ep.image_width = pending.front().width;
    ep.image_height = pending.front().height;
    ep.reuse_layers = params.reuse == Reuse::incremental;
    if (pending.front().shift) {
      // Everything after the patch embedding depends on the token's absolute position and on
      // its context, both moved: every layer runs on every token (only the patch embeddings
      // of the shifted patches are the previous frame's), so the frame is exact.
      ep.reuse_layers = false;
    } else if (pending.front().r.refresh) {
      encoder->reset();
      // A refresh right after a refresh (a pan, a moving camera: most tiles change every
      // frame): the next frame will most likely drop the layer caches again, so this one is
      // encoded as --reuse exact does, without them (a full encode that also keeps the
      // attention bound's state costs about twice as much). The first frame that is not a
      // refresh then makes them with a full encode of its own.
      if (last_refresh) ep.reuse_layers = false;
    } else if (params.reuse == Reuse::incremental &&
               (exact_groups_left > 0 || (heavy_resample > 0 && resample_share() >= heavy_resample))) {
      exact_groups_left = std::max(exact_groups_left - 1, 0);
      ep.reuse_layers = false;  // heavy change: a full encode costs less than reuse
    } else if (params.reuse == Reuse::incremental && params.drift_refresh > 0 && last_drift > params.drift_refresh) {
      // The error reuse has left is estimated above the bound: this group starts from scratch
      // (the layout and the patches stay; the encoder recomputes every token).
      encoder->reset();
      pending.front().r.refresh = true, pending.front().r.refresh_reason = "drift";
    }
    std::vector<IncrementalFrame> frames;
    for (const Pending& q : pending)
      frames.push_back({.patches = &q.r.batch.patches,
                        .positions = &q.r.batch.positions,
                        .prev_row = q.had_layout ? std::span<const int64_t>(q.r.previous_row) : std::span<const int64_t>(),
                        .patch_dirty = q.resample});
    std::vector<IncrementalResult> er = encoder->encode_group(frames, ep, exec);
    if (ep.reuse_layers && params.reuse == Reuse::incremental) {
      double work = 0;
      int64_t gated = 0;
      for (const IncrementalResult& x : er)
        if (x.approximate) work += x.flops_fraction, ++gated;
      if (params.exact_above_work > 0 && gated > 0 && work / double(gated) > params.exact_above_work) {
        exact_groups_left = kExactGroups;
        heavy_resample = resample_share();
      } else {
        heavy_resample = 0;
      }
    }
    for (size_t i = 0; i < pending.size(); ++i) {
      FrameResult& r = pending[i].r;
      const int64_t N = r.batch.size();
      r.embeddings = std::move(er[i].embeddings);
      r.projected = std::move(er[i].projected);
      if (params.reuse == Reuse::incremental) r.recomputed = std::move(er[i].recomputed);
      else if (params.reuse == Reuse::exact) r.recomputed = pending[i].resample;
      else r.recomputed.assign(size_t(N), 1);
      r.approximate = er[i].approximate;
      r.drift_estimate = er[i].drift_estimate, r.drift_estimate_max = er[i].drift_estimate_max;
      last_drift = r.drift_estimate;
      last_refresh = r.refresh;
      r.encoder_work = er[i].flops_fraction;
    }
  } else {
    for (Pending& q : pending) q.r.recomputed = q.resample;
  }
  // The last frame's patches stay for the next frame's clean tokens (one copy per group, into
  // the buffer the previous group's copy used).
  const Tensor& last = pending.back().r.batch.patches;
  if (batch.patches.dtype() == last.dtype() && batch.patches.shape() == last.shape() && !last.empty())
    std::memcpy(batch.patches.bytes(), last.bytes(), last.size_bytes());
  else
    batch.patches = last.clone();
  // The group's encoder time, shared out evenly over its frames.
  const double encode_ms = ms_since(t0) / double(pending.size());
  for (Pending& q : pending) {
    q.r.recomputed_tokens = std::count(q.r.recomputed.begin(), q.r.recomputed.end(), uint8_t(1));
    q.r.timings.encode_ms = encode_ms;
    q.r.group_frames = int(pending.size());
    out.push_back(std::move(q.r));
  }
  pending.clear();
  return out;
}

// ---- change test and refresh decision ------------------------------------------------------
void VideoSession::Impl::detect_change(const ImageU8& frame, FrontFrame& f) {
  FrameResult& r = f.out.r;
  const auto t0 = Clock::now();
  f.size_changed = video_detail::change_test(frame, pyramid, processed, params, grid, exec, r, f.dirty);
  if (r.refresh && r.refresh_reason == "scene-cut") {
    // A pan: the layout and every layer are made again, but the patches the shift carries
    // over keep their patch embeddings (when an encoder has the previous frame's).
    constexpr int kMaxShiftPatches = 4;
    if (encoder && have_layout &&
        video_detail::estimate_patch_shift(pyramid.level(0), frame, params.tokenize.patch_px, kMaxShiftPatches,
                                           f.shift_x, f.shift_y))
      f.shifted = true, r.refresh_reason = "shift";
  }
  r.timings.change_ms = ms_since(t0);
}

// ---- pyramid -----------------------------------------------------------------------------
void VideoSession::Impl::update_frame_pyramid(ImageU8 frame, FrontFrame& f) {
  const VideoParams& p = params;
  FrameResult& r = f.out.r;
  const auto t0 = Clock::now();
  // The relevance cache describes the pyramid before this update: unusable if the update throws.
  f.relevance_levels = std::exchange(relevance_cache.levels, 0);
  const int L = resolve_max_level(grid, p.tokenize.alloc.max_level);
  const int levels = std::max(L + 1, p.tokenize.relevance.stats_level + 1);
  if (r.refresh) {
    r.dirty_tiles = r.tiles;
    if (!f.size_changed && pyramid.num_levels() > 0) recycled = std::move(pyramid.level(0));
    pyramid = build_pyramid(std::move(frame), PyramidParams{.max_levels = levels}, exec);
  } else {
    copy_tiles(frame, pyramid.level(0), grid, f.dirty, exec);
    f.pd = update_pyramid(pyramid, p.tokenize.patch_px, f.dirty, exec);
    recycled = std::move(frame);
  }
  r.timings.pyramid_ms = ms_since(t0);
}

// ---- relevance ---------------------------------------------------------------------------
RelevanceMap VideoSession::Impl::frame_relevance(const Query& query, FrontFrame& f) {
  FrameResult& r = f.out.r;
  const auto t0 = Clock::now();
  // Only the dirty tiles' detail energies are measured again (bit for bit a full computation).
  relevance_cache.levels = f.relevance_levels;
  RelevanceMap rel = compute_relevance(pyramid, params.tokenize.patch_px, query, params.tokenize.relevance, exec,
                                       relevance_cache,
                                       r.refresh ? std::span<const uint8_t>() : std::span<const uint8_t>(f.dirty));
  r.timings.relevance_ms = ms_since(t0);
  return rel;
}

// ---- layout (with hysteresis) and each token's previous row ------------------------------
void VideoSession::Impl::place_tokens(const RelevanceMap& rel, const Query& query, FrontFrame& f) {
  const VideoParams& p = params;
  FrameResult& r = f.out.r;
  const auto t0 = Clock::now();
  bool reallocate = r.refresh || !have_layout || !same_query(query, layout_query) || p.layout_hysteresis <= 0;
  if (!reallocate) {
    double diff = 0, total = 0;
    for (size_t i = 0; i < rel.score.size(); ++i)
      diff += std::fabs(double(rel.score[i]) - layout_relevance[i]), total += layout_relevance[i];
    reallocate = diff > double(p.layout_hysteresis) * total;
  }
  f.had_layout = have_layout && !r.refresh;
  if (reallocate) {
    Allocation a = allocate(rel, p.tokenize.alloc);
    r.layout_changed = !have_layout || a.layout.tokens != allocation->layout.tokens;
    allocation = std::make_shared<const Allocation>(std::move(a));
    layout_relevance = rel.score;
    layout_query = query;
    have_layout = true;
  }
  r.allocation = allocation;
  const std::vector<Token>& tokens = allocation->layout.tokens;
  const int64_t N = int64_t(tokens.size());
  // Each token's previous row; the row index of the previous layout is still in rows.
  r.previous_row.assign(size_t(N), -1);
  f.resample.assign(size_t(N), 1);
  if (f.had_layout) {
    for (int64_t i = 0; i < N; ++i) {
      const Token& t = tokens[size_t(i)];
      const int32_t pr = row_of(t);
      r.previous_row[size_t(i)] = pr;
      f.resample[size_t(i)] = pr < 0 || t.level >= int(f.pd.nodes.size()) || f.pd.dirty(t.level, t.x, t.y);
    }
  }
  r.timings.allocate_ms = ms_since(t0);
}

// ---- patches: the clean tokens keep theirs ------------------------------------------------
void VideoSession::Impl::extract_patches(FrontFrame& f) {
  const VideoParams& p = params;
  FrameResult& r = f.out.r;
  TokenBatch& nb = f.batch;
  if (!f.had_layout) {
    nb = extract(pyramid, *allocation, p.tokenize.extract, exec);
    return;
  }
  const std::vector<Token>& tokens = allocation->layout.tokens;
  const int64_t N = int64_t(tokens.size());
  nb = allocation_batch(*allocation, p.tokenize.extract);
  Allocation sub;
  sub.rate_map.grid = grid;
  sub.max_level = allocation->max_level;
  sub.budget_tokens = allocation->budget_tokens;
  std::vector<int64_t> which;
  for (int64_t i = 0; i < N; ++i)
    if (f.resample[size_t(i)]) which.push_back(i), sub.layout.tokens.push_back(tokens[size_t(i)]);
  sub.layout.level_offsets = {0, int32_t(which.size())};
  const size_t row_bytes = size_t(nb.patches.size_bytes() / std::max<int64_t>(N, 1));
  const Tensor& previous = previous_patches();
  if (!which.empty()) {
    const TokenBatch sb = extract(pyramid, sub, p.tokenize.extract, exec);
    for (size_t j = 0; j < which.size(); ++j)
      std::memcpy(nb.patches.bytes() + size_t(which[j]) * row_bytes, sb.patches.bytes() + j * row_bytes, row_bytes);
  }
  for (int64_t i = 0; i < N; ++i)
    if (!f.resample[size_t(i)])
      std::memcpy(nb.patches.bytes() + size_t(i) * row_bytes,
                  previous.bytes() + size_t(r.previous_row[size_t(i)]) * row_bytes, row_bytes);
}

// A token of level l lines up with a token of the previous layout when the shift is a multiple
// of its tile (P·2^l px); its patch embedding is reused only when its patch is the previous
// token's byte for byte (coarser levels are resampled: the frame's edge and the resampling
// filter can make a shifted tile differ). `rows` still holds the previous layout's rows.
void VideoSession::Impl::reuse_shifted_patches(FrontFrame& f) {
  FrameResult& r = f.out.r;
  const TokenBatch& nb = f.batch;
  const TileGrid& g = grid;
  const std::vector<std::vector<int32_t>>& previous_rows = rows;
  const std::vector<Token>& tokens = allocation->layout.tokens;
  const int64_t N = int64_t(tokens.size());
  const int P = params.tokenize.patch_px;
  const size_t row_bytes = size_t(nb.patches.size_bytes() / std::max<int64_t>(N, 1));
  const Tensor& previous = previous_patches();
  for (int64_t i = 0; i < N; ++i) {
    const Token& t = tokens[size_t(i)];
    const int tile = P << t.level;
    if (t.level >= int(previous_rows.size()) || f.shift_x % tile != 0 || f.shift_y % tile != 0) continue;
    const int64_t px = int64_t(t.x) + f.shift_x / tile, py = int64_t(t.y) + f.shift_y / tile;
    if (px < 0 || py < 0 || px >= g.tiles_x_at(t.level) || py >= g.tiles_y_at(t.level)) continue;
    const int32_t pr = previous_rows[size_t(t.level)][size_t(py * g.tiles_x_at(t.level) + px)];
    if (pr < 0 || int64_t(pr) * int64_t(row_bytes) + int64_t(row_bytes) > int64_t(previous.size_bytes())) continue;
    if (std::memcmp(nb.patches.bytes() + size_t(i) * row_bytes, previous.bytes() + size_t(pr) * row_bytes,
                    row_bytes) != 0)
      continue;
    r.previous_row[size_t(i)] = pr;
    f.resample[size_t(i)] = 0;
  }
}

// ---- keep the state ------------------------------------------------------------------------
// The patches go to the frame's result as they are: until the frame leaves the session, the
// next frame reads them there (previous_patches()), and encode_pending() keeps a copy of the
// group's last. A copy per frame here was a fresh 0.8 MB (ViT-B/16 f32, 273 tokens) for
// every pending frame: first-touch page faults that made a video's first frame group slower.
VideoSession::Impl::Pending VideoSession::Impl::keep_state(FrontFrame& f) {
  FrameResult& r = f.out.r;
  Tensor kept = std::move(batch.patches);
  batch = std::move(f.batch);
  index_rows();
  r.batch.patches = std::move(batch.patches);
  batch.patches = std::move(kept);
  r.batch.positions = batch.positions.clone();
  r.batch.levels = batch.levels.clone();
  r.batch.boxes = batch.boxes;
  r.batch.level_offsets = batch.level_offsets;
  r.batch.patch_px = batch.patch_px;
  r.batch.params = batch.params;
  ++processed;
  Pending out = std::move(f.out);
  out.resample = std::move(f.resample);
  out.had_layout = f.had_layout || f.shifted;
  out.shift = f.shifted;
  out.width = grid.image_width, out.height = grid.image_height;
  return out;
}

VideoSession::Impl::Pending VideoSession::Impl::front(ImageU8 frame, const Query& query, int64_t index, double pts_s) {
  if (frame.empty()) throw Error(Errc::invalid_argument, "video: empty frame");
  if (frame.channels() != 3) frame = to_rgb(frame);
  FrontFrame f;
  f.out.r.index = index;
  f.out.r.pts_s = pts_s;
  detect_change(frame, f);
  update_frame_pyramid(std::move(frame), f);
  const RelevanceMap rel = frame_relevance(query, f);
  place_tokens(rel, query, f);
  const auto t0 = Clock::now();
  extract_patches(f);
  if (f.shifted) reuse_shifted_patches(f);
  f.out.r.resampled_tokens = std::count(f.resample.begin(), f.resample.end(), uint8_t(1));
  f.out.r.timings.extract_ms = ms_since(t0);
  return keep_state(f);
}

}  // namespace fovea
