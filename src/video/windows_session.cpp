// The windows foveation of a video: one sequence per window, each reused while its pixels stay
// (windows_session.hpp; the contract is in fovea/video.hpp).
#include "video/windows_session.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "fovea/error.hpp"
#include "video/frame_state.hpp"

namespace fovea::video_detail {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

bool same_window(const TokenWindow& a, const TokenWindow& b) {
  return a.box == b.box && a.grid_x == b.grid_x && a.grid_y == b.grid_y && a.level == b.level;
}

// Whether a window's pixels can have changed: a resized base view reads every tile; another
// window reads the tiles under its box.
bool touches_dirty(const TokenWindow& w, const TileGrid& g, const std::vector<uint8_t>& dirty) {
  if (w.level < 0) return std::find(dirty.begin(), dirty.end(), uint8_t(1)) != dirty.end();
  const int P = g.patch_px;
  const int x0 = std::max(0, int(std::floor(w.box[0])) / P), y0 = std::max(0, int(std::floor(w.box[1])) / P);
  const int x1 = std::min(g.tiles_x, int(std::ceil(w.box[2]) + P - 1) / P);
  const int y1 = std::min(g.tiles_y, int(std::ceil(w.box[3]) + P - 1) / P);
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x)
      if (dirty[size_t(y) * g.tiles_x + x]) return true;
  return false;
}

// A plan of some windows of `plan`, none covered (to sample their patches alone).
WindowPlan sub_plan(const WindowPlan& plan, const std::vector<size_t>& which) {
  WindowPlan s;
  s.patch_px = plan.patch_px;
  s.image_width = plan.image_width;
  s.image_height = plan.image_height;
  for (size_t w : which) {
    s.windows.push_back(plan.windows[w]);
    s.covered.emplace_back(size_t(plan.windows[w].tokens()), uint8_t(0));
  }
  return s;
}

// Each cell of a window at its centre in the window's own pixels (as fovea::encode_windows
// places them): a standalone image of grid_x·P × grid_y·P pixels.
void local_positions(const TokenWindow& w, int P, float* pos) {
  for (int64_t i = 0; i < w.tokens(); ++i) {
    pos[i * 4 + 0] = (float(i % w.grid_x) + 0.5f) * float(P);
    pos[i * 4 + 1] = (float(i / w.grid_x) + 0.5f) * float(P);
    pos[i * 4 + 2] = float(P);
    pos[i * 4 + 3] = 0;
  }
}

// A copy of `b` that shares no tensor with it.
TokenBatch copy_of(const TokenBatch& b) {
  TokenBatch c;
  c.patches = b.patches.clone();
  c.positions = b.positions.clone();
  c.levels = b.levels.clone();
  c.boxes = b.boxes;
  c.level_offsets = b.level_offsets;
  c.patch_px = b.patch_px;
  c.params = b.params;
  c.windows = b.windows;
  c.window = b.window.clone();
  c.covered = b.covered.clone();
  return c;
}

Tensor rows_of(const Tensor& t, int64_t first, int64_t n) {
  std::vector<int64_t> shape = t.shape();
  shape[0] = n;
  Tensor out(t.dtype(), shape);
  const size_t row = size_t(t.size_bytes() / std::max<int64_t>(t.dim(0), 1));
  std::memcpy(out.bytes(), t.bytes() + size_t(first) * row, size_t(n) * row);
  return out;
}

}  // namespace

struct WindowsVideo::Impl {
  VideoParams params;
  const VitModel* model = nullptr;
  Executor& exec;
  int64_t processed = 0;
  PyramidU8 pyramid;
  TileGrid grid;
  RelevanceCache relevance_cache;
  ImageU8 recycled;
  // The plan and what it was made from (the layout's hysteresis).
  bool have_plan = false;
  WindowPlan plan;
  std::vector<float> plan_relevance, plan_detail;  // the relevance (score, detail_total) the plan was made from
  Query plan_query;
  std::shared_ptr<const Allocation> allocation = std::make_shared<const Allocation>();
  TokenBatch batch;  // the last frame's tokens, every window's
  // Per window of the plan (batch order): its outputs as the last frame left them.
  struct Slot {
    int64_t first_row = 0;  // in `batch`
    Tensor embeddings, projected, class_token;
    std::unique_ptr<IncrementalEncoder> encoder;  // Reuse::incremental: the sequence's own
  };
  std::vector<Slot> slots;

  Impl(const VideoParams& p, const VitModel* m, Executor& e) : params(p), model(m), exec(e) {}

  // This frame's windows as the encode steps read them: the plan, the batch of every window's
  // patches (`first[w]`: window w's first row) and its row size.
  struct FrameWindows {
    const WindowPlan& plan;
    const TokenBatch& nb;
    const std::vector<int64_t>& first;
    size_t row_bytes;
  };
  double encode_incremental(const FrameWindows& fw, size_t w, bool continues, Slot& sl, FrameResult& r);
  double encode_batched(const FrameWindows& fw, const std::vector<size_t>& which, std::vector<Slot>& slots_now);
  static void gather_outputs(const std::vector<Slot>& slots_now, const std::vector<int64_t>& first, FrameResult& r);

  // process()'s steps, in order.
  void update_frame(ImageU8 frame, FrameResult& r, std::vector<uint8_t>& dirty);
  struct FramePlan {
    WindowPlan plan;
    std::vector<int> matched;  // per window, its slot in the last frame (the same box, grid and level), or -1
    bool replan = false, had_plan = false;
  };
  FramePlan plan_frame(const Query& query, const std::vector<uint8_t>& dirty, FrameResult& r);
  struct FramePatches {
    std::vector<int64_t> first;  // window w's rows: first[w] .. first[w + 1]
    TokenBatch nb;
    std::vector<uint8_t> same;   // per window: its box and patches are the last frame's
    size_t row_bytes = 0;
  };
  FramePatches frame_patches(const FramePlan& f, const std::vector<uint8_t>& dirty, FrameResult& r);
  std::vector<Slot> encode_frame(const FramePlan& f, const FramePatches& fp, FrameResult& r);

  WindowParams window_params() const {
    WindowParams wp = params.tokenize.windows;
    wp.budget_tokens = params.tokenize.alloc.budget_tokens;
    return wp;
  }
  // The query moved only within the windows already placed for it: every fixation stays inside
  // a level-0 window of the plan, a quarter window from its edges (the planner's own test for a
  // focus it needs no new window for), and nothing else of the query changed.
  bool query_kept(const Query& q) const {
    if (same_query(q, plan_query)) return true;
    if (q.fixations.size() != plan_query.fixations.size() || q.embedding != plan_query.embedding ||
        q.fixations.empty())
      return false;
    Query a = q, b = plan_query;
    a.fixations.clear(), b.fixations.clear();
    if (!same_query(a, b)) return false;
    const float margin = float(params.tokenize.windows.grid * params.tokenize.patch_px) / 4.0f;
    for (size_t i = 0; i < q.fixations.size(); ++i) {
      if (q.fixations[i].weight != plan_query.fixations[i].weight) return false;
      const float x = q.fixations[i].x_px, y = q.fixations[i].y_px;
      bool inside = false;
      for (const TokenWindow& w : plan.windows)
        if (w.level == 0 && w.kind == TokenWindow::Kind::query && x >= w.box[0] + margin && x < w.box[2] - margin &&
            y >= w.box[1] + margin && y < w.box[3] - margin)
          inside = true;
      if (!inside) return false;
    }
    return true;
  }
};

WindowsVideo::WindowsVideo(const VideoParams& params, const VitModel* model, Executor& exec)
    : impl_(std::make_unique<Impl>(params, model, exec)) {
  const WindowParams& w = params.tokenize.windows;
  if (w.grid < 1 || w.grid > 256)
    throw Error(Errc::invalid_argument, "video: the windows' grid must be 1..256 tokens a side, got " + std::to_string(w.grid));
  if (w.max_windows < 1 || w.max_windows > 4096)
    throw Error(Errc::invalid_argument, "video: max_windows must be 1..4096, got " + std::to_string(w.max_windows));
}

WindowsVideo::~WindowsVideo() = default;
ImageU8 WindowsVideo::take_recycled() { return std::move(impl_->recycled); }
const PyramidU8& WindowsVideo::pyramid() const { return impl_->pyramid; }
const Allocation& WindowsVideo::allocation() const { return *impl_->allocation; }

// Reuse::incremental: window w's sequence through its own encoder; it recomputes the tokens whose
// layer inputs moved when the window continues the last frame's (the same box, new pixels),
// everything otherwise. Returns the work done, in tokens of a full encode.
double WindowsVideo::Impl::encode_incremental(const FrameWindows& fw, size_t w, bool continues, Slot& sl,
                                              FrameResult& r) {
  const TokenWindow& win = fw.plan.windows[w];
  const int P = params.tokenize.patch_px;
  const int64_t first = fw.first[w];
  if (!sl.encoder) sl.encoder = std::make_unique<IncrementalEncoder>(*model);
  if (!continues) sl.encoder->reset();
  IncrementalParams ip = params.encoder;
  ip.image_width = win.grid_x * P;
  ip.image_height = win.grid_y * P;
  ip.reuse_layers = true;
  Tensor patches = rows_of(fw.nb.patches, first, win.tokens());
  Tensor pos(DType::f32, {win.tokens(), 4});
  local_positions(win, P, pos.data<float>());
  std::vector<int64_t> prev;
  std::vector<uint8_t> patch_dirty;
  if (continues) {
    prev.resize(size_t(win.tokens()));
    patch_dirty.resize(size_t(win.tokens()));
    for (int64_t i = 0; i < win.tokens(); ++i) {
      prev[size_t(i)] = i;
      patch_dirty[size_t(i)] = std::memcmp(fw.nb.patches.bytes() + size_t(first + i) * fw.row_bytes,
                                           batch.patches.bytes() + size_t(r.previous_row[size_t(first + i)]) * fw.row_bytes,
                                           fw.row_bytes) != 0;
    }
  }
  IncrementalResult ir = sl.encoder->encode(patches, pos, prev, patch_dirty, ip, exec);
  sl.embeddings = std::move(ir.embeddings);
  sl.projected = std::move(ir.projected);
  sl.class_token = Tensor();  // the incremental encoder keeps the class token to itself
  for (int64_t i = 0; i < win.tokens(); ++i) r.recomputed[size_t(first + i)] = ir.recomputed[size_t(i)];
  r.approximate = r.approximate || ir.approximate;
  r.drift_estimate = std::max(r.drift_estimate, ir.drift_estimate);
  r.drift_estimate_max = std::max(r.drift_estimate_max, ir.drift_estimate_max);
  return ir.flops_fraction * double(win.tokens());
}

// The windows `which` through one encode_batch call, exactly (each its own sequence); their
// slots take the outputs and drop their incremental encoders (whose caches are of older pixels).
// Returns the work done, in tokens of a full encode.
double WindowsVideo::Impl::encode_batched(const FrameWindows& fw, const std::vector<size_t>& which,
                                          std::vector<Slot>& slots_now) {
  const int P = params.tokenize.patch_px;
  int64_t n = 0;
  for (size_t w : which) n += fw.plan.windows[w].tokens();
  std::vector<int64_t> shape = fw.nb.patches.shape();
  shape[0] = n;
  Tensor patches(fw.nb.patches.dtype(), shape), pos(DType::f32, {n, 4});
  std::vector<ImageSpan> spans;
  int64_t at = 0;
  for (size_t w : which) {
    const TokenWindow& win = fw.plan.windows[w];
    std::memcpy(patches.bytes() + size_t(at) * fw.row_bytes, fw.nb.patches.bytes() + size_t(fw.first[w]) * fw.row_bytes,
                size_t(win.tokens()) * fw.row_bytes);
    local_positions(win, P, pos.data<float>() + at * 4);
    spans.push_back({win.tokens(), win.grid_x * P, win.grid_y * P});
    at += win.tokens();
  }
  const EncodeParams ep{.precision = params.encoder.precision};
  std::vector<Encoding> es = encode_batch(*model, TensorView(patches), TensorView(pos), spans, ep, exec);
  for (size_t k = 0; k < which.size(); ++k) {
    Slot& sl = slots_now[which[k]];
    sl.embeddings = std::move(es[k].embeddings);
    sl.projected = std::move(es[k].projected);
    sl.class_token = std::move(es[k].class_token);
    sl.encoder.reset();
  }
  return double(n);
}

// The frame's outputs: the kept rows (r.rows, batch order) of every window's embeddings and
// projection, and each window's class token when every window has one.
void WindowsVideo::Impl::gather_outputs(const std::vector<Slot>& slots_now, const std::vector<int64_t>& first,
                                        FrameResult& r) {
  const int64_t K = int64_t(r.rows.size());
  auto gather = [&](Tensor Slot::*field) {
    const Tensor& t0 = slots_now.front().*field;
    if (t0.rank() != 2) return Tensor();
    const int64_t d = t0.dim(1);
    Tensor out(DType::f32, {K, d});
    size_t w = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t row = r.rows[size_t(k)];
      while (row >= first[w + 1]) ++w;
      const Tensor& src = slots_now[w].*field;
      std::memcpy(out.data<float>() + k * d, src.data<float>() + (row - first[w]) * d, size_t(d) * 4);
    }
    return out;
  };
  r.embeddings = gather(&Slot::embeddings);
  r.projected = gather(&Slot::projected);
  bool classes = true;
  for (const Slot& sl : slots_now) classes = classes && sl.class_token.rank() == 2;
  if (classes) {
    const int64_t d = slots_now.front().class_token.dim(1);
    r.window_class_tokens = Tensor(DType::f32, {int64_t(slots_now.size()), d});
    for (size_t w = 0; w < slots_now.size(); ++w)
      std::memcpy(r.window_class_tokens.data<float>() + int64_t(w) * d, slots_now[w].class_token.data<float>(), size_t(d) * 4);
  }
}

// The change test against the last frame and the pyramid: rebuilt on a refresh, else the dirty
// tiles copied in and their pyramid updated. `dirty`: the tiles that changed (all on a refresh).
void WindowsVideo::Impl::update_frame(ImageU8 frame, FrameResult& r, std::vector<uint8_t>& dirty) {
  const VideoParams& p = params;
  auto t0 = Clock::now();
  const bool size_changed = video_detail::change_test(frame, pyramid, processed, p, grid, exec, r, dirty);
  r.timings.change_ms = ms_since(t0);
  t0 = Clock::now();
  const int relevance_levels = std::exchange(relevance_cache.levels, 0);
  const int levels = std::max(windows_pyramid_levels(grid.image_width, grid.image_height, p.tokenize.patch_px,
                                                     p.tokenize.windows.grid),
                              p.tokenize.relevance.stats_level + 1);
  if (r.refresh) {
    r.dirty_tiles = r.tiles;
    dirty.assign(size_t(grid.tiles()), 1);
    if (!size_changed && pyramid.num_levels() > 0) recycled = std::move(pyramid.level(0));
    pyramid = build_pyramid(std::move(frame), PyramidParams{.max_levels = levels}, exec);
  } else {
    copy_tiles(frame, pyramid.level(0), grid, dirty, exec);
    update_pyramid(pyramid, p.tokenize.patch_px, dirty, exec);
    recycled = std::move(frame);
  }
  relevance_cache.levels = relevance_levels;
  r.timings.pyramid_ms = ms_since(t0);
}

// The relevance and the frame's plan: the last frame's while the relevance moved less than the
// layout's hysteresis (when a fixation moved inside its window, query_kept, the content's part
// alone, the detail energies before the query weighs them, so that the query's move does not
// move the windows); each window matched to the last frame's same window.
WindowsVideo::Impl::FramePlan WindowsVideo::Impl::plan_frame(const Query& query, const std::vector<uint8_t>& dirty,
                                                             FrameResult& r) {
  const VideoParams& p = params;
  auto t0 = Clock::now();
  RelevanceMap rel = compute_relevance(pyramid, p.tokenize.patch_px, query, p.tokenize.relevance, exec, relevance_cache,
                                       r.refresh ? std::span<const uint8_t>() : std::span<const uint8_t>(dirty));
  r.timings.relevance_ms = ms_since(t0);
  t0 = Clock::now();
  FramePlan f;
  f.replan = r.refresh || !have_plan || p.layout_hysteresis <= 0 || !query_kept(query);
  if (!f.replan) {
    const bool moved = !same_query(query, plan_query);
    const std::vector<float>& now = moved && !rel.detail_total.empty() ? rel.detail_total : rel.score;
    const std::vector<float>& then = moved && !rel.detail_total.empty() ? plan_detail : plan_relevance;
    double diff = 0, total = 0;
    f.replan = now.size() != then.size();
    for (size_t i = 0; !f.replan && i < now.size(); ++i) diff += std::fabs(double(now[i]) - then[i]), total += then[i];
    f.replan = f.replan || diff > double(p.layout_hysteresis) * total;
  }
  f.had_plan = have_plan && !r.refresh;
  f.plan = f.replan ? plan_windows(rel, query, window_params()) : plan;
  f.matched.assign(f.plan.windows.size(), -1);
  if (f.had_plan)
    for (size_t w = 0; w < f.plan.windows.size(); ++w)
      for (size_t o = 0; o < plan.windows.size(); ++o)
        if (same_window(f.plan.windows[w], plan.windows[o])) {
          f.matched[w] = int(o);
          break;
        }
  if (f.replan) {
    r.layout_changed = !have_plan || f.plan.windows.size() != plan.windows.size() ||
                       std::count(f.matched.begin(), f.matched.end(), -1) > 0;
    plan_relevance = rel.score;
    plan_detail = rel.detail_total;
    plan_query = query;
    have_plan = true;
    Allocation a;
    a.budget_tokens = p.tokenize.alloc.budget_tokens;
    a.rate_map = f.plan.rate_map();
    a.max_level = f.plan.pyramid_levels() - 1;
    allocation = std::make_shared<const Allocation>(std::move(a));
  }
  r.allocation = allocation;
  r.timings.allocate_ms = ms_since(t0);
  return f;
}

// The frame's patches: every window sampled on a new plan; on the same plan, the last frame's
// batch with the windows the dirty tiles touch sampled again. A window is the last frame's when
// its box and its patches are, byte for byte (`same`).
WindowsVideo::Impl::FramePatches WindowsVideo::Impl::frame_patches(const FramePlan& f, const std::vector<uint8_t>& dirty,
                                                                   FrameResult& r) {
  const VideoParams& p = params;
  const auto t0 = Clock::now();
  const size_t W = f.plan.windows.size();
  FramePatches fp;
  fp.first.assign(W + 1, 0);
  for (size_t w = 0; w < W; ++w) fp.first[w + 1] = fp.first[w] + f.plan.windows[w].tokens();
  const int64_t N = fp.first[W];
  std::vector<uint8_t> resampled(W, 1);
  if (!f.had_plan || f.replan) {
    fp.nb = extract_windows(pyramid, f.plan, p.tokenize.extract, exec);
  } else {
    fp.nb = copy_of(batch);
    std::vector<size_t> again;
    for (size_t w = 0; w < W; ++w)
      if (touches_dirty(f.plan.windows[w], grid, dirty)) again.push_back(w);
      else resampled[w] = 0;
    if (!again.empty()) {
      const TokenBatch sb = extract_windows(pyramid, sub_plan(f.plan, again), p.tokenize.extract, exec);
      const size_t row = size_t(fp.nb.patches.size_bytes() / std::max<int64_t>(N, 1));
      int64_t at = 0;
      for (size_t w : again) {
        std::memcpy(fp.nb.patches.bytes() + size_t(fp.first[w]) * row, sb.patches.bytes() + size_t(at) * row,
                    size_t(f.plan.windows[w].tokens()) * row);
        at += f.plan.windows[w].tokens();
      }
    }
  }
  fp.row_bytes = size_t(fp.nb.patches.size_bytes() / std::max<int64_t>(N, 1));
  fp.same.assign(W, 0);
  r.previous_row.assign(size_t(N), -1);
  for (size_t w = 0; w < W; ++w) {
    if (f.matched[w] < 0) continue;
    const Slot& o = slots[size_t(f.matched[w])];
    for (int64_t i = 0; i < f.plan.windows[w].tokens(); ++i) r.previous_row[size_t(fp.first[w] + i)] = o.first_row + i;
    fp.same[w] = std::memcmp(fp.nb.patches.bytes() + size_t(fp.first[w]) * fp.row_bytes,
                             batch.patches.bytes() + size_t(o.first_row) * fp.row_bytes,
                             size_t(f.plan.windows[w].tokens()) * fp.row_bytes) == 0;
  }
  for (size_t w = 0; w < W; ++w)
    if (resampled[w]) r.resampled_tokens += f.plan.windows[w].tokens();
  r.timings.extract_ms = ms_since(t0);
  return fp;
}

// Every window whose pixels changed, each a sequence of its own (through its incremental encoder,
// or all of them in one exact call), the others reused; the frame's outputs are the kept tokens
// of every window, in batch order. Returns the slots of this frame's windows.
std::vector<WindowsVideo::Impl::Slot> WindowsVideo::Impl::encode_frame(const FramePlan& f, const FramePatches& fp,
                                                                       FrameResult& r) {
  const VideoParams& p = params;
  const auto t0 = Clock::now();
  const size_t W = f.plan.windows.size();
  const int64_t N = fp.first[W];
  std::vector<Slot> now(W);
  r.window_reused.assign(W, 0);
  r.recomputed.assign(size_t(N), 0);
  std::vector<size_t> encode_now;
  for (size_t w = 0; w < W; ++w) {
    const int m = f.matched[w];
    const bool reuse = p.reuse != Reuse::off && fp.same[w] && (!model || slots[size_t(m)].embeddings.rank() > 0);
    if (m >= 0) now[w] = std::move(slots[size_t(m)]);
    now[w].first_row = fp.first[w];
    if (reuse) {
      r.window_reused[w] = 1;
    } else {
      encode_now.push_back(w);
      std::fill(r.recomputed.begin() + fp.first[w], r.recomputed.begin() + fp.first[w + 1], uint8_t(1));
    }
  }
  double work = 0;
  if (model && !encode_now.empty()) {
    const FrameWindows fw{f.plan, fp.nb, fp.first, fp.row_bytes};
    std::vector<size_t> batched;  // encoded in one call, exactly
    for (size_t w : encode_now) {
      if (p.reuse == Reuse::incremental)
        work += encode_incremental(fw, w, f.matched[w] >= 0 && now[w].embeddings.rank() > 0, now[w], r);
      else
        batched.push_back(w);
    }
    if (!batched.empty()) work += encode_batched(fw, batched, now);
  }
  r.encoder_work = N > 0 ? work / double(N) : 0;
  const uint8_t* cov = fp.nb.covered.data<uint8_t>();
  for (int64_t i = 0; i < N; ++i)
    if (!cov[i]) r.rows.push_back(i);
  if (model) gather_outputs(now, fp.first, r);
  r.recomputed_tokens = std::count(r.recomputed.begin(), r.recomputed.end(), uint8_t(1));
  r.timings.encode_ms = ms_since(t0);
  return now;
}

FrameResult WindowsVideo::process(ImageU8 frame, const Query& query, int64_t index, double pts_s) {
  Impl& s = *impl_;
  if (frame.empty()) throw Error(Errc::invalid_argument, "video: empty frame");
  if (frame.channels() != 3) frame = to_rgb(frame);
  FrameResult r;
  r.index = index;
  r.pts_s = pts_s;
  std::vector<uint8_t> dirty;
  s.update_frame(std::move(frame), r, dirty);
  Impl::FramePlan f = s.plan_frame(query, dirty, r);
  Impl::FramePatches fp = s.frame_patches(f, dirty, r);
  std::vector<Impl::Slot> slots = s.encode_frame(f, fp, r);
  // The state the next frame starts from.
  r.batch = copy_of(fp.nb);
  s.batch = std::move(fp.nb);
  s.plan = std::move(f.plan);
  s.slots = std::move(slots);
  ++s.processed;
  return r;
}

}  // namespace fovea::video_detail
