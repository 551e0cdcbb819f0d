#include "video_native.hpp"  // fovea video with a native-resolution tower

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli_util.hpp"
#include "encode_native.hpp"
#include "fovea/error.hpp"
#include "fovea/native.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/video.hpp"

namespace fovea::cli {
namespace {

// One chunk's encode, kept until the file is written.
struct NativeVideoChunk {
  NativeEncoding e;
  NativeGrid grid;
  int64_t first_frame = 0, last_frame = 0;  // decoded-frame indexes
  int frames = 0;  // sampled frames in the chunk (before a short last chunk is padded)
  double first_pts = 0, last_pts = 0;
  NativeSize size;
};

// Rows of `parts` stacked: [Σ rows, cols] of their dtype (all alike).
Tensor stack_native_rows(const std::vector<const Tensor*>& parts) {
  int64_t rows = 0;
  for (const Tensor* t : parts) rows += t->dim(0);
  Tensor out(parts.front()->dtype(), {rows, parts.front()->dim(1)});
  std::byte* dst = out.bytes();
  for (const Tensor* t : parts) {
    std::copy_n(t->bytes(), t->size_bytes(), dst);
    dst += t->size_bytes();
  }
  return out;
}

// The options a native tower's video takes, checked before the video is opened.
void check_native_video_args(const VitConfig& c, const NativeVideoArgs& a) {
  const int tp = c.native.temporal_patch;
  if (!a.refused.empty()) {
    std::string list;
    for (const std::string& o : a.refused) list += (list.empty() ? "" : ", ") + o;
    throw Error(Errc::invalid_argument, "a native-resolution tower (" + std::string(to_string(c.family)) +
                                            ") encodes the sampled frames as native video chunks; " + list +
                                            " do(es) not apply to it");
  }
  if (a.chunk_frames < 0 || a.chunk_frames > 4096 || (a.chunk_frames % tp) != 0)
    throw Error(Errc::invalid_argument, "--chunk-frames " + std::to_string(a.chunk_frames) + ": a native tower pairs frames by its temporal patch (" +
                                            std::to_string(tp) + "): give a multiple of it up to 4096, or 0 for the whole clip");
  if (a.cap_pixels_per_frame && !c.native.video_limits_over_frames)
    throw Error(Errc::invalid_argument, "--cap-pixels-per-frame applies to Qwen3-VL's video processor; '" + a.model_spec +
                                            "' is " + std::string(to_string(c.family)));
}

// The sampled frames, chunk by chunk, each encoded as one native video.
struct EncodedVideo {
  VideoInfo info;
  double rate = 0;  // the sampled frames' rate
  int64_t sampled = 0;
  std::vector<NativeVideoChunk> chunks;
};

EncodedVideo encode_native_chunks(const VitModel& model, const NativeVideoArgs& a, Executor& ex) {
  const VitConfig& c = model.config();
  const int tp = c.native.temporal_patch;
  quiet_ffmpeg_log();
  VideoReaderOptions ro;
  ro.max_pixels = a.max_pixels;
  ro.autorotate = a.autorotate;
  VideoReader reader = VideoReader::open(a.video, ro);
  EncodedVideo v;
  v.info = reader.info();
  // The sampled frames' rate: what Qwen2.5-VL's temporal ids (second_per_grid_t) need.
  v.rate = a.fps > 0 ? a.fps : v.info.fps > 0 ? v.info.fps / std::max(1, a.every) : 2.0;
  const FrameFilter keep = frame_sampler(a.every, a.fps);
  const NativeParams params{.cap_pixels_per_frame = a.cap_pixels_per_frame};
  std::vector<ImageU8> frames;  // the current chunk's frames (copies: the reader reuses its buffer)
  int64_t first = 0, last = 0;
  double first_pts = 0, last_pts = 0;
  auto flush = [&] {
    if (frames.empty()) return;
    NativeVideoChunk ch;
    ch.first_frame = first, ch.last_frame = last, ch.frames = int(frames.size()), ch.first_pts = first_pts, ch.last_pts = last_pts;
    // A last chunk shorter than the temporal patch: its last frame repeated, as the processor
    // pads an odd frame count (Qwen3-VL's refuses fewer frames than the patch outright).
    while (int(frames.size()) < tp) frames.push_back(frames.back().clone());
    std::vector<ImageViewU8> views(frames.begin(), frames.end());
    const NativeInput in = prepare_native_video(model, views, v.rate, params, ex);
    ch.grid = in.grid;
    ch.size = {in.grid.h * c.patch_px, in.grid.w * c.patch_px};
    ch.e = encode_native(model, {&in, 1}, {.precision = a.precision}, ex);
    v.chunks.push_back(std::move(ch));
    frames.clear();
  };
  VideoFrame f;
  while ((a.max_frames == 0 || v.sampled < a.max_frames) && reader.read(f, keep)) {
    if (frames.empty()) first = f.index, first_pts = f.pts_s;
    last = f.index, last_pts = f.pts_s;
    frames.push_back(f.image.channels() == 3 ? f.image.clone() : to_rgb(f.image));
    ++v.sampled;
    if (a.chunk_frames > 0 && int(frames.size()) == a.chunk_frames) flush();
  }
  flush();
  if (v.chunks.empty()) throw Error(Errc::invalid_argument, a.video + ": no frame to encode (the sampling kept none)");
  return v;
}

// Every chunk's rows back to back, and the per-chunk tensors of the file.
struct StackedVideo {
  Tensor projected, embeddings, mrope, grid_thw, rows, chunk_frames, pts;
  std::vector<Tensor> deep;
  int64_t merged = 0;
  double encode_ms = 0;
  int reused = 0;
};

StackedVideo stack_chunks(const std::vector<NativeVideoChunk>& chunks) {
  StackedVideo s;
  const int64_t k = int64_t(chunks.size());
  std::vector<const Tensor*> projected, embeddings, mrope;
  for (const NativeVideoChunk& ch : chunks)
    projected.push_back(&ch.e.projected), embeddings.push_back(&ch.e.embeddings), mrope.push_back(&ch.e.mrope_positions);
  s.projected = stack_native_rows(projected), s.embeddings = stack_native_rows(embeddings), s.mrope = stack_native_rows(mrope);
  s.deep.resize(chunks[0].e.deepstack.size());
  for (size_t j = 0; j < s.deep.size(); ++j) {
    std::vector<const Tensor*> parts;
    for (const NativeVideoChunk& ch : chunks) parts.push_back(&ch.e.deepstack[j]);
    s.deep[j] = stack_native_rows(parts);
  }
  s.grid_thw = Tensor(DType::i32, {k, 3}), s.rows = Tensor(DType::i64, {k + 1});
  s.chunk_frames = Tensor(DType::i64, {k, 3}), s.pts = Tensor(DType::f64, {k, 2});
  for (int64_t i = 0; i < k; ++i) {
    const NativeVideoChunk& ch = chunks[size_t(i)];
    s.grid_thw.data<int32_t>()[i * 3] = ch.grid.t, s.grid_thw.data<int32_t>()[i * 3 + 1] = ch.grid.h;
    s.grid_thw.data<int32_t>()[i * 3 + 2] = ch.grid.w;
    s.rows.data<int64_t>()[i] = s.merged;
    s.merged += ch.e.projected.dim(0);
    int64_t* cf = s.chunk_frames.data<int64_t>() + i * 3;
    cf[0] = ch.first_frame, cf[1] = ch.last_frame, cf[2] = ch.frames;
    s.pts.data<double>()[i * 2] = ch.first_pts, s.pts.data<double>()[i * 2 + 1] = ch.last_pts;
    s.encode_ms += ch.e.encode_ms;
    s.reused += ch.e.frames_reused;
  }
  s.rows.data<int64_t>()[k] = s.merged;
  return s;
}

}  // namespace

int run_native_video(const VitModel& model, const NativeVideoArgs& a, Executor& ex) {
  const VitConfig& c = model.config();
  check_native_video_args(c, a);
  const EncodedVideo v = encode_native_chunks(model, a, ex);
  const std::vector<NativeVideoChunk>& chunks = v.chunks;
  const StackedVideo st = stack_chunks(chunks);
  const Precision ran = chunks[0].e.precision;
  if (!a.output.empty()) {
    std::map<std::string, std::string> meta = encoder_metadata(model, a.asked);
    meta["source"] = a.video;
    meta["foveation"] = "native_video";
    meta["merge_size"] = std::to_string(c.native.merge);
    meta["temporal_patch_size"] = std::to_string(c.native.temporal_patch);
    meta["fps"] = std::to_string(v.rate);
    meta["frames_per_chunk"] = std::to_string(a.chunk_frames);
    meta["video_pixel_limits"] = std::to_string(c.native.video_min_pixels) + ".." + std::to_string(c.native.video_max_pixels) +
                                 (c.native.video_limits_over_frames ? " over all frames of a chunk" : " a frame") + " (" +
                                 c.native.video_limits_source + ")";
    meta["mrope_positions"] = "(t, h, w) ids of each chunk's video from 0, as get_rope_index gives a video's tokens";
    meta["chunk_frames"] = "[k, 3]: each chunk's first and last decoded frame index and its frame count";
    save_native_encoding(a.output, st.projected, st.embeddings, st.grid_thw, "video_grid_thw", st.mrope, st.deep,
                         {{"chunk_rows", &st.rows}, {"chunk_frames", &st.chunk_frames}, {"chunk_pts", &st.pts}}, meta);
  }
  const VideoInfo& info = v.info;
  nlohmann::json s = {{"video", {{"path", a.video}, {"width", info.width}, {"height", info.height}, {"fps", info.fps}}},
                      {"foveation", "native_video"},
                      {"frames", v.sampled},
                      {"fps", v.rate},
                      {"chunk_frames", a.chunk_frames},
                      {"merged_tokens", st.merged},
                      {"frames_reused", st.reused},
                      {"timings_ms", {{"encode", st.encode_ms}}},
                      {"threads", ex.threads()},
                      {"encoder", encoder_summary(model, a.model_spec, ran,
                                                  {{"projected", {st.projected.dim(0), st.projected.dim(1)}}})},
                      {"outputs", {{"embeddings", a.output}}},
                      {"chunks", nlohmann::json::array()}};
  for (const NativeVideoChunk& ch : chunks)
    s["chunks"].push_back({{"first_frame", ch.first_frame},
                           {"last_frame", ch.last_frame},
                           {"frames", ch.frames},
                           {"pts", {ch.first_pts, ch.last_pts}},
                           {"resized", {ch.size.width, ch.size.height}},
                           {"video_grid_thw", {ch.grid.t, ch.grid.h, ch.grid.w}},
                           {"merged_tokens", ch.e.projected.dim(0)},
                           {"encode_ms", ch.e.encode_ms}});
  if (a.json) {
    std::cout << json_text(s) << '\n';
  } else {
    std::printf("fovea video: %s (%dx%d, %.3g fps), %s\n", a.video.c_str(), info.width, info.height, info.fps,
                model.describe().c_str());
    std::printf("  %lld frames at %.3g fps in %lld chunk(s): %lld merged tokens, %.1f ms %s\n", (long long)v.sampled, v.rate,
                (long long)chunks.size(), (long long)st.merged, st.encode_ms, std::string(to_string(ran)).c_str());
    for (const NativeVideoChunk& ch : chunks)
      std::printf("  frames %lld..%lld (%d): %dx%d, video_grid_thw (%d, %d, %d), %lld tokens\n", (long long)ch.first_frame,
                  (long long)ch.last_frame, ch.frames, ch.size.width, ch.size.height, ch.grid.t, ch.grid.h,
                  ch.grid.w, (long long)ch.e.projected.dim(0));
    if (!a.output.empty()) std::printf("  wrote %s\n", a.output.c_str());
  }
  return 0;
}

}  // namespace fovea::cli
