// fovea/video.hpp — video in, foveated tokens per frame out, re-doing only what changed.
//
//   fovea::VideoReader reader = fovea::VideoReader::open("clip.mp4");   // any ffmpeg input
//   fovea::Executor exec;
//   fovea::VitModel model = fovea::VitModel::load("random:vit-b16");
//   fovea::VideoParams vp;                      // budget, patch, thresholds, reuse mode
//   fovea::VideoSession session(vp, &model, exec);
//   fovea::VideoFrame frame;
//   while (reader.read(frame)) {
//     fovea::Query q;  q.fixations.push_back({320, 180});
//     fovea::FrameResult r = session.process(std::move(frame.image), q, frame.index, frame.pts_s);
//     // r.embeddings [N, D], r.batch.positions [N, 4], r.recomputed [N]
//     frame.image = std::move(r.recycled);   // hand the buffer back: no allocation per frame
//   }
//   // Or in groups of 8 frames (vp.group_frames = 8): the encoder reads its weights once per
//   // group; results come out a group at a time, in order (flush() at the end).
//   //   for (fovea::FrameResult& r : session.push(std::move(frame.image), q, frame.index, frame.pts_s,
//   //                                             &frame.image)) { ... }
//   //   for (fovea::FrameResult& r : session.flush()) { ... }
//
// VideoReader decodes through libavformat / libavcodec and converts with libswscale straight
// into the planes of an ImageU8 (AV_PIX_FMT_GBRP, no extra copy). It streams: it holds the
// packet being decoded, the decoder's own reference frames and the caller's frame, never the
// video; memory does not grow with the length. Packets the decoder rejects are skipped and
// counted (corrupt_packets), as ffmpeg's command line does; the stream goes on.
//
// VideoSession keeps the previous frame's state and, per frame:
//   1. change test per finest tile (P×P px): the tile is dirty when, in any 4×4 block of it,
//      the mean absolute difference to the reference frame (over the three channels, 8-bit
//      levels) exceeds `change_threshold`. The block mean averages codec noise away; the max
//      over blocks still sees a small object. The reference is the session's own level 0:
//      only dirty tiles are copied into it, so sub-threshold noise never accumulates into
//      the pyramid and a clean tile's pixels are exactly those its tokens were made from;
//   2. a full refresh (everything recomputed, layout re-allocated) on the first frame, on
//      every keyframe_interval-th frame, on a size change, and when more than
//      refresh_fraction of the tiles are dirty (a scene cut);
//   3. the pyramid is updated in place (fovea::update_pyramid): bit-identical to a rebuild;
//   4. relevance is recomputed; the previous layout is kept unless the query moved or the
//      relevance changed by more than layout_hysteresis (relative L1), so unchanged content
//      keeps its tokens;
//   5. a token whose footprint holds no dirty tile and which was in the previous layout keeps
//      its patch and its patch embedding (exact); the others are sampled again;
//   6. the encoder runs in the chosen Reuse mode (IncrementalEncoder).
// With tokenize.foveation windows (fovea/windows.hpp) steps 4–6 become: the window plan is kept
// unless the relevance moved by more than layout_hysteresis or a fixation left the level-0
// window placed for it (a quarter window from its edges); every window and the base view is a
// sequence of its own: one whose box and patches are the previous frame's hands on its outputs
// bit for bit (FrameResult::window_reused), the others are encoded again, each as a standalone
// image, all in one batched call (Reuse::exact, the mode's usual choice) or each through an
// IncrementalEncoder of its own (Reuse::incremental: approximate, no class tokens). Frames are
// not grouped (group_frames, drift_refresh and exact_above_work do not apply).
//
// Thread safety: a VideoReader and a VideoSession are each one thread at a time. Sessions on
// one shared VitModel run in parallel (each session's encoder has its own EncoderContext; the
// model's packed weights are made once for all of them), as do plain encodes on that model.
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/encoder.hpp"
#include "fovea/exec.hpp"
#include "fovea/image.hpp"
#include "fovea/incremental_encoder.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/tokenize.hpp"

FOVEA_API_BEGIN
namespace fovea {

// ---- decoding ---------------------------------------------------------------------------------

struct VideoReaderOptions {
  int threads = 0;                     // decoder threads; 0: libavcodec's choice (a few frames in flight)
  uint64_t max_pixels = 100'000'000;   // larger frames are refused (Error(limit_exceeded))
  int max_consecutive_errors = 1000;   // read errors in a row after which the stream is taken as ended
  // Frames are turned as the stream's display matrix says (phone videos: "rotate 90"), as
  // players and ffmpeg's command line show them; false: as stored (ffmpeg's -noautorotate).
  bool autorotate = true;
};

struct VideoInfo {
  int width = 0, height = 0;  // as the frames come out (after autorotation)
  // How stored frames are turned for display, in EXIF numbering: 1 as stored, 3 rotated 180°,
  // 6 rotated 90° clockwise, 8 rotated 90° counter-clockwise, 2/4/5/7 mirrored variants. It is
  // applied when VideoReaderOptions::autorotate (the default); rotation_applied says whether.
  // A display matrix that is not a multiple of 90° is not applied (a warning says so).
  int orientation = 1;
  bool rotation_applied = false;
  // Sample (pixel) aspect ratio, width:height of one stored pixel; 1:1 when square or unknown.
  // Frames are not resampled for it: tokens are made from the stored pixels.
  int sar_num = 1, sar_den = 1;
  double fps = 0;           // average frame rate; 0 when the container does not say
  double duration_s = 0;    // 0 when unknown
  int64_t frame_count = 0;  // the container's count; 0 when unknown
  std::string container;    // e.g. "mov,mp4,m4a,3gp,3g2,mj2"
  std::string codec;        // e.g. "h264"
};

// "rotated 90 degrees clockwise", ... for VideoInfo::orientation (EXIF numbering); "as stored" for 1.
std::string_view orientation_name(int orientation);

struct VideoFrame {
  ImageU8 image;       // RGB, planar; the buffer is reused by the next read() when the size matches
  int64_t index = 0;   // 0-based, in presentation order, counting every decoded frame
  // Presentation time in seconds: the stream's best-effort timestamp, strictly increasing.
  // Where the stream's timestamps do not increase they are repaired (timestamps_repaired()):
  // absent: the previous frame's + 1/fps; equal to the previous frame's or less than half a
  // frame interval (1/fps, else 1/25 s) before it (a duplicate, a coarse time base): the
  // previous + 1/(16·fps); further back (a discontinuity: concatenated streams, a restarted
  // clock): the previous + 1/fps, and every later frame shifted by as much, so the stream's own
  // spacing goes on. Forward gaps are kept.
  double pts_s = 0;
};

// Which decoded frames read() converts and returns (the others are decoded, counted, dropped).
using FrameFilter = std::function<bool(int64_t index, double pts_s)>;

// `fovea video --every N | --fps F` (and fovea.video's every= / fps=): every N-th decoded frame
// (N >= 1), or by pts at most F frames a second: the first frame, then the first frame at or
// after each tick of a grid 1/F s apart that starts at it. A gap in the stream skips the ticks
// it covers (no burst of frames after it); F above the stream's rate keeps every frame. Neither
// (0, 0): every frame. The filter keeps state: one per reader. Error(invalid_argument) for
// N < 0, F < 0 or not finite, or both.
FrameFilter frame_sampler(int every, double fps);

class VideoReader {
 public:
  // Throws Error(io) for a missing or unreadable file, Error(corrupt_data) for a file ffmpeg
  // cannot read as media, Error(unsupported) when it has no video stream or no decoder,
  // Error(limit_exceeded) beyond max_pixels. Messages name the file.
  static VideoReader open(const std::string& path, const VideoReaderOptions& options = {});
  // The same from a whole file in memory (a download buffer, a fuzzer's input): ffmpeg probes
  // the format from the bytes. `data` must outlive the reader; `name` only labels messages.
  static VideoReader open_bytes(std::span<const uint8_t> data, const std::string& name,
                                const VideoReaderOptions& options = {});
  VideoReader(VideoReader&&) noexcept;
  VideoReader& operator=(VideoReader&&) noexcept;
  ~VideoReader();

  const VideoInfo& info() const;
  // The next frame (kept by `keep`, if given) into `frame`; false at the end of the stream.
  bool read(VideoFrame& frame, const FrameFilter& keep = nullptr);

  int64_t frames_decoded() const;   // every frame out of the decoder, kept or not
  int64_t corrupt_packets() const;  // packets the decoder or the demuxer rejected (skipped)
  int64_t corrupt_frames() const;   // frames the decoder flagged as corrupt (still returned)
  int64_t timestamps_repaired() const;  // frames whose pts did not increase and were repaired (see VideoFrame)
  // One line per problem since the last call (for warnings on stderr), at most 100 kept.
  std::vector<std::string> take_warnings();

 private:
  VideoReader();
  void open_stream();
  struct FOVEA_INTERNAL Impl;
  std::unique_ptr<Impl> impl_;
};

// quiet_ffmpeg_log() (fovea/image.hpp) keeps FFmpeg's own log lines off stderr.

// ---- the session ----------------------------------------------------------------------------

enum class Reuse : uint8_t {
  off,          // every frame from scratch: pyramid, patches, full encode
  exact,        // unchanged tokens keep patch and patch embedding; the ViT runs on every token
  incremental,  // and the ViT recomputes only tokens whose layer input changed (approximate)
};
std::string_view to_string(Reuse r);

struct VideoParams {
  TokenizeParams tokenize;          // patch size, budget (tokenize.alloc), relevance, extraction
  Reuse reuse = Reuse::incremental;
  float change_threshold = 8.0f;    // 8-bit levels, mean |Δ| over a 4×4 block (all channels); ≥ 0
  float refresh_fraction = 0.5f;    // dirty tiles above this fraction: full refresh (scene cut)
  int keyframe_interval = 0;        // K > 0: every K-th processed frame is a full refresh
  float layout_hysteresis = 0.1f;   // relative L1 change of relevance that re-allocates; 0: always
  IncrementalParams encoder;        // precision, token threshold (image size is filled in)
  // Incremental ViT: a frame group starts with a full encode (refresh_reason "drift") when the
  // last encoded frame's drift estimate (FrameResult::drift_estimate) exceeds this; 0: never.
  // Checked between groups, so with group_frames G a refresh comes up to G frames later.
  float drift_refresh = 0;
  // Incremental ViT: when a group's reused frames did more than this share of a full encode's
  // multiply-adds on average (FrameResult::encoder_work), the next three groups are encoded
  // exactly (every layer on every token, as Reuse::exact; not approximate), and after them every
  // group whose frames resample as large a share of their tokens as that group did; then reuse
  // is tried again: tracking that much change costs more than a full encode. 0: never. Decided
  // between groups, so with group_frames G the exact groups start up to G frames later.
  float exact_above_work = 0.45f;
  // Incremental ViT only: frames whose encoder work runs as one group (IncrementalEncoder::
  // encode_group: weights read once per group, the same results). Results come out when a group
  // is full (or at flush()), so latency grows by up to group_frames − 1 frames. 1..1024.
  int group_frames = 1;
};

struct FrameTimings {
  double change_ms = 0, pyramid_ms = 0, relevance_ms = 0, allocate_ms = 0, extract_ms = 0, encode_ms = 0;
  double total_ms() const { return change_ms + pyramid_ms + relevance_ms + allocate_ms + extract_ms + encode_ms; }
};

struct FrameResult {
  int64_t index = 0;
  double pts_s = 0;
  TokenBatch batch;               // this frame's tokens (patches, positions, levels)
  Tensor embeddings;              // [N, D]; empty without a model
  Tensor projected;               // [N, E] when the model has a projector (the LLM's input), else empty
  std::vector<uint8_t> recomputed;  // [N] 1: the token's patch embedding or ViT state was recomputed
  std::vector<int64_t> previous_row;  // [N] the token's row in the previous frame, -1 if new
  int64_t dirty_tiles = 0;        // tiles that failed the change test (all of them on a refresh)
  int64_t tiles = 0;
  int64_t resampled_tokens = 0;   // tokens whose patch was sampled again (on a "shift" refresh:
                                  // whose patch is not a previous token's, shifted, byte for byte)
  int64_t recomputed_tokens = 0;  // count of recomputed[]
  bool refresh = false;           // full refresh
  std::string refresh_reason;     // "first", "keyframe", "scene-cut", "size", "reuse-off", "drift", "shift"
                                  // ("shift": a camera shift by whole patches; the patches it carries
                                  // over keep their patch embeddings, every layer runs again: exact)
  bool layout_changed = false;    // the allocation was made again
  bool approximate = false;       // the embeddings come from incremental ViT reuse
  // The incremental encoder's estimate of the error it left (IncrementalResult::drift_estimate):
  // per token, the relative changes left unapplied summed over layers; mean and largest.
  double drift_estimate = 0, drift_estimate_max = 0;
  double encoder_work = 1;        // share of a full encode's multiply-adds the encoder did (IncrementalResult)
  int group_frames = 1;           // frames encoded together with this one (timings.encode_ms is its share)
  std::shared_ptr<const Allocation> allocation;  // this frame's layout (windows foveation: its rate map only)
  // The windows foveation (tokenize.foveation windows) only. `batch` holds every encoded token,
  // window after window (TokenBatch::windows, window, covered), and recomputed / previous_row
  // have one entry per encoded token. `embeddings` and `projected` hold the tokens handed on (no
  // finer window covers them), in batch order: rows[k] is the batch row of embeddings row k, as
  // Encoding::rows of fovea::encode_windows. window_class_tokens [W, D]: every window's class
  // token (row 0 the base view's; models with one). window_reused [W]: 1 when the window's
  // pixels did not change and its outputs are the previous frame's, bit for bit.
  std::vector<int64_t> rows;
  Tensor window_class_tokens;
  std::vector<uint8_t> window_reused;
  FrameTimings timings;
  ImageU8 recycled;               // the decoded frame's buffer, handed back for the next read
};

class VideoSession {
 public:
  // `model` may be null (patches only); it must outlive the session. Throws
  // Error(invalid_argument) for bad parameters.
  VideoSession(const VideoParams& params, const VitModel* model, Executor& exec);
  ~VideoSession();
  VideoSession(const VideoSession&) = delete;
  VideoSession& operator=(const VideoSession&) = delete;

  // One frame (RGB or gray, any size; a size change is a refresh). The query may change per frame.
  // The frame is encoded alone (a group of one), whatever group_frames says; throws
  // Error(invalid_argument) while push() has frames pending.
  FrameResult process(ImageU8 frame, const Query& query, int64_t index = 0, double pts_s = 0);
  // Streaming in groups: the frame goes through the front end now (change test, pyramid,
  // relevance, layout, patches) and waits for its group's encoder pass. Returns the frames
  // finished by this call, in order: none, or a whole group (when it is full, or when this frame
  // is a refresh: the frames before it, then the refresh alone, a group of its own). `recycled`, if given, receives a buffer the caller
  // can decode the next frame into. flush() encodes what is pending (call it at the end).
  std::vector<FrameResult> push(ImageU8 frame, const Query& query, int64_t index, double pts_s,
                                ImageU8* recycled = nullptr);
  std::vector<FrameResult> flush();
  int64_t pending_frames() const;

  const PyramidU8& pyramid() const;        // the reference frame's pyramid
  const VitModel* model() const;           // the session's model, or null (patches only)
  const Allocation& allocation() const;    // the layout of the last frame in
  const VideoParams& params() const;

 private:
  struct FOVEA_INTERNAL Impl;
  std::unique_ptr<Impl> impl_;
};

// The change test alone: per finest tile of `grid`, 1 where `a` and `b` differ (see above).
// Images of equal size and channel count.
std::vector<uint8_t> changed_tiles(const ImageU8& a, const ImageU8& b, const TileGrid& grid, float threshold,
                                   Executor& exec);

}  // namespace fovea

// ---- output -----------------------------------------------------------------------------------
namespace fovea {

// What a finished run wrote, for video_metadata().
struct VideoRunSummary {
  std::string source;        // the input, as given
  VideoInfo info;
  int64_t frames = 0;        // frames written
  bool approximate = false;  // some frame kept reused layer states (FrameResult::approximate)
};

// The metadata of a video tokens or embeddings file: the run's parameters (budget, patch,
// reuse, change threshold, keyframe, group), the model (its name, description, which hidden
// state the rows are, the precision that ran for params.encoder.precision and, when it differs,
// precision_requested) and the preprocessing applied to the patches (mean/std and
// where they came from), and whether the embeddings are an approximation. `fovea video -o`
// and the Python module's fovea.video(out=...) both write exactly this. `model` may be null
// (patches only); `model_name` is the name the user gave (path or "random:...").
std::map<std::string, std::string> video_metadata(const VideoParams& params, const VideoRunSummary& run,
                                                  const VitModel* model, const std::string& model_name,
                                                  const std::string& preprocessing_source);

// Streams a video's tokens into one safetensors file with bounded memory: the per-token rows
// (embeddings or patches) go to an unlinked spill file beside the output as frames arrive; the
// small tensors stay in memory. finish() writes the file unnamed in `path`'s folder and renames
// it over `path` once complete (fovea::AtomicFile), so a reader never sees a half-written file
// and a run that fails, is never finished or is killed leaves none.
// The file holds, frame after frame:
//   frame_offsets [F+1] I64 (frame f's tokens are rows frame_offsets[f] .. frame_offsets[f+1]),
//   pts [F] F64 (seconds), <rows_name> [T, row_shape...], positions [T, 4] F32, levels [T] I32,
//   recomputed [T] U8; the windows foveation adds the windows of every frame (add_frame_windows).
class VideoTokenWriter {
 public:
  // Throws Error(io) when the spill file cannot be created beside `path`.
  VideoTokenWriter(const std::string& path, const std::string& rows_name, DType dtype, std::vector<int64_t> row_shape);
  ~VideoTokenWriter();
  VideoTokenWriter(const VideoTokenWriter&) = delete;
  VideoTokenWriter& operator=(const VideoTokenWriter&) = delete;

  // Another per-token tensor, `name` [T, row_shape...] (e.g. "projected"), streamed through its
  // own spill file; before the first add_frame. Throws Error(invalid_argument) after it.
  void add_rows_tensor(const std::string& name, DType dtype, std::vector<int64_t> row_shape);
  // rows [n, row_shape...] of the writer's dtype, positions [n, 4] f32, levels [n] i32, recomputed n entries;
  // `extra`: one tensor [n, ...] per add_rows_tensor, in order.
  void add_frame(const Tensor& rows, const Tensor& positions, const Tensor& levels,
                 const std::vector<uint8_t>& recomputed, double pts_s, const std::vector<const Tensor*>& extra = {});
  // The windows foveation: the windows of the frame added last, and their class tokens [W, D]
  // (or an empty tensor). A file whose every frame has windows gains window_offsets [F+1] I64
  // (frame f's windows are rows window_offsets[f] .. window_offsets[f+1]), window_boxes [ΣW, 4]
  // F32, window_grids [ΣW, 2] I32, window_levels [ΣW] F32 (window_tensors_of, frame after frame)
  // and, when every frame has them, window_class_tokens [ΣW, D] F32. Throws
  // Error(invalid_argument) before the first frame or twice for one frame.
  void add_frame_windows(const std::vector<TokenWindow>& windows, const Tensor& class_tokens);
  void finish(const std::map<std::string, std::string>& metadata);
  int64_t frames() const;
  int64_t tokens() const;

 private:
  struct FOVEA_INTERNAL Impl;
  std::unique_ptr<Impl> impl_;
};


// ---- the frame loop -----------------------------------------------------------------------------

// run_video: what `fovea video` and the Python module's fovea.video() both run. Frames are
// read (the `keep` filter, up to max_frames), pushed through the session in its groups, flushed
// at the end; each finished frame, in order, is added to the output file (when there is one)
// and handed to on_result. The file is VideoTokenWriter's (`embeddings` and, with a projector,
// `projected` with a model; `patches` without), its metadata video_metadata()'s.
struct VideoRunOptions {
  std::string source;               // the input as the user gave it (messages, metadata)
  int64_t max_frames = 0;           // stop after this many frames pushed; 0: the whole stream
  FrameFilter keep;                 // which decoded frames are processed; null: every one
  Query query;                      // every frame's query, unless frame_query is given
  std::function<Query(const VideoFrame&)> frame_query;  // a frame's own query (e.g. a fixation track)
  std::string output;               // the safetensors file; empty: none is written
  // For the file's metadata (video_metadata; the precision comes from the session's params): the
  // model's name as the user gave it, where the patches' normalisation came from.
  std::string model_name, preprocessing_source;
  // Optional hooks, called on the calling thread; an exception from one ends the run (no file).
  std::function<void(const VideoFrame&, const Query&)> on_input;  // a frame about to be pushed
  std::function<void(const std::string&)> on_warning;            // a reader warning, one line
  std::function<void()> after_push;                               // after each push (e.g. an interrupt check)
};

struct VideoRunStats {
  int64_t frames = 0;             // frames finished (and written)
  int64_t tokens = 0, recomputed_tokens = 0;
  double session_ms = 0;          // Σ FrameResult::timings.total_ms()
  double decode_ms = 0;           // time spent in VideoReader::read
  bool approximate = false;       // some frame kept reused layer states
  double reuse_rate() const { return tokens ? 1.0 - double(recomputed_tokens) / double(tokens) : 0.0; }
  double mean_ms() const { return frames ? session_ms / double(frames) : 0.0; }
};

// Each finished frame with the totals so far (this frame included); it may move from the result.
using VideoResultFn = std::function<void(FrameResult&, const VideoRunStats&)>;

// Throws Error(corrupt_data) "<source>: no frame could be decoded" when no frame came out, and
// whatever reading, the session, the writer or a hook throws; the output file then does not exist.
VideoRunStats run_video(VideoReader& reader, VideoSession& session, const VideoRunOptions& options,
                        const VideoResultFn& on_result = nullptr);

}  // namespace fovea
FOVEA_API_END
