// run_video: the frame loop `fovea video` and fovea.video() share (see fovea/video.hpp).
#include <chrono>
#include <cstring>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/video.hpp"

namespace fovea {

FrameFilter frame_sampler(int every, double fps) {
  if (every < 0) throw Error(Errc::invalid_argument, "video: every must be >= 1 (0: every frame)");
  if (!(fps >= 0) || !std::isfinite(fps)) throw Error(Errc::invalid_argument, "video: fps must be > 0");
  if (every > 0 && fps > 0) throw Error(Errc::invalid_argument, "video: every and fps are exclusive");
  if (every > 0) return [every](int64_t index, double) { return index % every == 0; };
  if (fps == 0) return nullptr;
  const double step = 1.0 / fps;
  constexpr double kSlack = 1e-9;  // seconds: pts that land on a tick up to rounding count as on it
  return [step, start = 0.0, next = -1.0, started = false](int64_t, double pts) mutable {
    if (!started) {
      started = true, start = pts, next = pts + step;
      return true;
    }
    if (pts + kSlack < next) return false;
    // The next tick after this frame: skips every tick a gap covered.
    next = start + (std::floor((pts + kSlack - start) / step) + 1) * step;
    return true;
  };
}

namespace {

// A windowed frame's per-row tensors for the file: the rows handed on (kept), or every row.
struct WindowRows {
  Tensor positions, levels, window;
  std::vector<uint8_t> recomputed;
};
WindowRows window_rows(const FrameResult& r, bool kept_only) {
  const TokenBatch& b = r.batch;
  std::vector<int64_t> rows = r.rows;
  if (!kept_only) {
    rows.resize(size_t(b.size()));
    for (int64_t i = 0; i < b.size(); ++i) rows[size_t(i)] = i;
  }
  const int64_t k = int64_t(rows.size());
  WindowRows w{Tensor(DType::f32, {k, 4}), Tensor(DType::i32, {k}), Tensor(DType::i32, {k}), {}};
  w.recomputed.resize(size_t(k));
  for (int64_t i = 0; i < k; ++i) {
    const int64_t row = rows[size_t(i)];
    std::memcpy(w.positions.data<float>() + i * 4, b.positions.data<float>() + row * 4, 16);
    w.levels.data<int32_t>()[i] = b.levels.data<int32_t>()[row];
    w.window.data<int32_t>()[i] = b.window.data<int32_t>()[row];
    w.recomputed[size_t(i)] = r.recomputed[size_t(row)];
  }
  return w;
}

}  // namespace

VideoRunStats run_video(VideoReader& reader, VideoSession& session, const VideoRunOptions& o,
                        const VideoResultFn& on_result) {
  using Clock = std::chrono::steady_clock;
  const VitModel* model = session.model();
  const VideoParams& vp = session.params();
  const int P = vp.tokenize.patch_px;
  // The writer first: an output that cannot be written fails the run before any frame is decoded.
  std::unique_ptr<VideoTokenWriter> writer;
  if (!o.output.empty()) {
    writer = model ? std::make_unique<VideoTokenWriter>(o.output, "embeddings", DType::f32,
                                                        std::vector<int64_t>{model->config().hidden})
                   : std::make_unique<VideoTokenWriter>(o.output, "patches", vp.tokenize.extract.dtype,
                                                        std::vector<int64_t>{3, P, P});
  }
  VideoRunStats st;
  const bool windowed = vp.tokenize.foveation == Foveation::windows;
  auto finish = [&](FrameResult& r) {
    if (writer) {
      if (st.frames == 0 && r.projected.rank() == 2)  // the projector's output, the LLM's input (as fovea encode writes it)
        writer->add_rows_tensor("projected", DType::f32, std::vector<int64_t>{r.projected.dim(1)});
      if (st.frames == 0 && windowed) {  // as fovea encode's and fovea tokenize's files: the window of each row
        writer->add_rows_tensor("window", DType::i32, {});
        if (!model) writer->add_rows_tensor("covered", DType::u8, {});
      }
      std::vector<const Tensor*> extra;
      if (r.projected.rank() == 2) extra.push_back(&r.projected);
      if (windowed) {
        // With a model, the rows handed on (embeddings file layout); without, every encoded
        // token's patch and whether a finer window covers it (token file layout).
        const WindowRows w = window_rows(r, model != nullptr);
        extra.push_back(&w.window);
        if (!model) extra.push_back(&r.batch.covered);
        writer->add_frame(model ? r.embeddings : r.batch.patches, w.positions, w.levels, w.recomputed, r.pts_s, extra);
        writer->add_frame_windows(r.batch.windows, r.window_class_tokens);
      } else {
        writer->add_frame(model ? r.embeddings : r.batch.patches, r.batch.positions, r.batch.levels, r.recomputed,
                          r.pts_s, extra);
      }
    }
    ++st.frames;
    st.tokens += r.batch.size();
    st.recomputed_tokens += r.recomputed_tokens;
    st.session_ms += r.timings.total_ms();
    st.approximate = st.approximate || r.approximate;
    if (on_result) on_result(r, st);
  };

  VideoFrame frame;
  int64_t pushed = 0;
  for (;;) {
    if (o.max_frames > 0 && pushed >= o.max_frames) break;
    const auto t0 = Clock::now();
    const bool got = reader.read(frame, o.keep);
    st.decode_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    for (const std::string& w : reader.take_warnings())
      if (o.on_warning) o.on_warning(w);
    if (!got) break;
    Query q = o.frame_query ? o.frame_query(frame) : o.query;
    if (o.on_input) o.on_input(frame, q);
    std::vector<FrameResult> done = session.push(std::move(frame.image), q, frame.index, frame.pts_s, &frame.image);
    ++pushed;
    for (FrameResult& r : done) finish(r);
    if (o.after_push) o.after_push();
  }
  for (FrameResult& r : session.flush()) finish(r);
  if (st.frames == 0) {
    // FFmpeg 5.1 has no animated-WebP demuxer: the file is one packet its decoder refuses.
    const bool webp = reader.info().codec == "webp";
    throw Error(Errc::corrupt_data, o.source + ": no frame could be decoded" +
                                        std::string(webp ? " (Debian 12's FFmpeg cannot decode an animated WebP as a "
                                                           "video; fovea tokenize reads its first frame)"
                                                         : ""));
  }
  if (writer) {
    VideoRunSummary summary;
    summary.source = o.source;
    summary.info = reader.info();
    summary.frames = st.frames;
    summary.approximate = st.approximate;
    writer->finish(video_metadata(vp, summary, model, o.model_name, o.preprocessing_source));
  }
  return st;
}

}  // namespace fovea
