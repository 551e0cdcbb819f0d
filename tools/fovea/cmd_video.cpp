// fovea video IN [--budget B] [--fixation X,Y | --fixations FILE.csv] [--model CKPT [--precision ..]]
//                [--foveation mixed|windows [--window-grid G] [--keep-covered]]
//                [--every N | --fps F] [--max-frames N] [--reuse exact|incremental|off] [--keyframe K]
//                [--threshold T] [--group G] [--check] [--store host|vulkan|vulkan-image] [--no-autorotate]
//                -o OUT.safetensors [--overlay PNG] [--json]
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <set>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "cli_util.hpp"
#include "command.hpp"
#include "model_preprocessing.hpp"
#include "video_native.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/store.hpp"
#include "fovea/video.hpp"
#include "fovea/viz.hpp"

namespace fovea::cli {
namespace {


// --check: per token of two [N, D] f32 tensors (a against the reference b), the cosine and the
// relative error ‖a − b‖₂ / ‖b‖₂ (the unit of the encoder's drift estimate); mean and worst.
struct RowCosines {
  double mean = 1, min = 1;
  double error_mean = 0, error_max = 0;
};
RowCosines row_cosines(const Tensor& a, const Tensor& b) {
  RowCosines r;
  const int64_t n = a.dim(0), d = a.dim(1);
  if (n == 0) return r;
  double total = 0, err = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* x = a.data<float>() + i * d;
    const float* y = b.data<float>() + i * d;
    double xy = 0, xx = 0, yy = 0, ee = 0;
    for (int64_t j = 0; j < d; ++j) {
      xy += double(x[j]) * y[j], xx += double(x[j]) * x[j], yy += double(y[j]) * y[j];
      ee += (double(x[j]) - y[j]) * (double(x[j]) - y[j]);
    }
    const double c = xx > 0 && yy > 0 ? xy / std::sqrt(xx * yy) : 1.0;
    const double e = yy > 0 ? std::sqrt(ee / yy) : 0.0;
    total += c, r.min = std::min(r.min, c), err += e, r.error_max = std::max(r.error_max, e);
  }
  r.mean = total / double(n), r.error_mean = err / double(n);
  return r;
}

// --fixations FILE.csv: lines "frame,x,y" (an optional header line; '#' comments). A frame
// uses the fixations of the last listed frame at or before it (several lines for one frame:
// several fixations); frames before the first listed one use --fixation, if any.
struct FixationTrack {
  std::map<int64_t, std::vector<Fixation>> by_frame;
  static FixationTrack load(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(Errc::io, path + ": cannot open the fixations file");
    FixationTrack t;
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      const size_t hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::stringstream ss(line);
      std::string a, b, c;
      std::getline(ss, a, ','), std::getline(ss, b, ','), std::getline(ss, c, ',');
      char* end = nullptr;
      const long long f = std::strtoll(a.c_str(), &end, 10);
      if (end == a.c_str()) {
        if (lineno == 1) continue;  // a header
        throw Error(Errc::invalid_argument, path + ":" + std::to_string(lineno) + ": expected frame,x,y");
      }
      char *ex = nullptr, *ey = nullptr;
      const float x = std::strtof(b.c_str(), &ex), y = std::strtof(c.c_str(), &ey);
      if (f < 0 || ex == b.c_str() || ey == c.c_str() || !std::isfinite(x) || !std::isfinite(y))
        throw Error(Errc::invalid_argument, path + ":" + std::to_string(lineno) + ": expected frame,x,y with frame >= 0");
      t.by_frame[f].push_back({x, y, 1.0f});
    }
    if (t.by_frame.empty()) throw Error(Errc::invalid_argument, path + ": no fixations in the file");
    return t;
  }
  // The fixations for `frame`, or nullptr before the first listed frame.
  const std::vector<Fixation>* at(int64_t frame) const {
    auto it = by_frame.upper_bound(frame);
    if (it == by_frame.begin()) return nullptr;
    return &std::prev(it)->second;
  }
};

// What a run adds up frame by frame for its summary.
struct RunTotals {
  int64_t kept_total = 0;  // windows: the tokens handed on (the file's rows), of the encoded ones
  double full_total = 0, cosine_total = 0, store_ms = 0;  // --check's full encodes and cosines; the store's time
  double cosine_min = 1, cosine_min_token = 1;
  nlohmann::json per_frame = nlohmann::json::array();
};

struct VideoCommand {
  TokenizeOptions tok;
  ExecOptions exec;
  std::string model_spec, output, precision = "fp32", fixations_csv, reuse, store_backend, overlay;
  int every = 0, keyframe = 0, group = 8;
  double fps = 0;
  int64_t max_frames = 0;
  float threshold = VideoParams{}.change_threshold;
  float token_threshold = IncrementalParams{}.token_threshold;
  std::string attention_threshold;  // a number, or "off"; empty: the token threshold / 0.7
  std::string mlp_threshold;        // a number, or "off"; empty: off (no MLP gate)
  int refresh_tokens = IncrementalParams{}.refresh_tokens;
  float drift_refresh = VideoParams{}.drift_refresh;
  float exact_above_work = VideoParams{}.exact_above_work;
  float hysteresis = VideoParams{}.layout_hysteresis;
  float refresh_fraction = VideoParams{}.refresh_fraction;
  bool json = false, check = false, decode_only = false, no_autorotate = false;
  // Native-resolution towers (video_native.hpp): frames a chunk, Qwen3-VL's per-frame cap, and
  // the options given that they do not take.
  int chunk_frames = NativeVideoArgs{}.chunk_frames;
  bool cap_pixels_per_frame = false, native_options_given = false;
  std::vector<std::string> not_native;

  // --decode-only: decode and convert every frame to RGB planes, nothing else (the benchmark's
  // floor against `ffmpeg -i IN -f null -`).
  int run_decode_only(VideoReader& reader) const {
    const auto t0 = std::chrono::steady_clock::now();
    VideoFrame frame;
    int64_t n = 0;
    while ((max_frames == 0 || n < max_frames) && reader.read(frame)) ++n;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::json s = {{"frames", n},
                        {"decode_ms", ms},
                        {"fps", ms > 0 ? 1000.0 * n / ms : 0.0},
                        {"corrupt_packets", reader.corrupt_packets()}};
    if (json) std::cout << json_text(s) << '\n';
    else std::printf("decoded %lld frames in %.1f ms (%.1f fps)\n", (long long)n, ms, ms > 0 ? 1000.0 * n / ms : 0.0);
    return 0;
  }

  int run() const {
    Query base_query;
    VideoParams vp = video_params(base_query);
    const ExecConfig exec_config = exec.config();
    if (check_arguments_only()) return 0;  // the CLI fuzz target: no file is read or written

    std::optional<FixationTrack> track;
    if (!fixations_csv.empty()) track = FixationTrack::load(fixations_csv);
    Executor ex(exec_config);
    std::optional<VitModel> model;
    std::string norm_source;
    if (!model_spec.empty()) {
      model = VitModel::load(model_spec);
      note_model(*model, model_spec);
      if (model->config().native.enabled()) return run_native(*model, vp, ex);
    }
    if (native_options_given) {
      throw invalid_argument("--chunk-frames and --cap-pixels-per-frame apply to a native-resolution tower (Qwen2-VL, "
                             "Qwen2.5-VL, Qwen3-VL) given with --model");
    }
    if (model) norm_source = fit_to_model(*model, vp);
    quiet_ffmpeg_log();
    VideoReaderOptions ro;
    ro.max_pixels = tok.max_pixels;
    ro.autorotate = !no_autorotate;
    VideoReader reader = VideoReader::open(tok.image, ro);
    const VideoInfo info = reader.info();
    if (decode_only) return run_decode_only(reader);
    VideoSession session(vp, model ? &*model : nullptr, ex);

    // The store: one sequence, delta-rebound every frame.
    SeqId seq = 0;
    std::unique_ptr<TokenStore> store = store_backend.empty() ? nullptr : make_store(*model, vp, seq);

    // ---- the loop (fovea::run_video; fovea.video() runs the same) ---------------------------
    Loop loop(*this, vp, model ? &*model : nullptr, ex, store.get(), seq);
    const VideoRunOptions options = run_options(base_query, track ? &*track : nullptr, norm_source, loop);
    loop.t_run = std::chrono::steady_clock::now();
    const VideoRunStats run =
        run_video(reader, session, options, [&loop](FrameResult& r, const VideoRunStats& so_far) { loop.finish_frame(r, so_far); });
    if (loop.progress) std::fprintf(stderr, "\n");
    if (loop.sheet) {
      loop.sheet_file->write(encode_png(loop.sheet->render()));
      loop.sheet_file->commit();
    }
    return report(run, loop.t, info, reader, vp, model ? &*model : nullptr, ex, store.get(),
                  loop.sheet ? &*loop.sheet : nullptr);
  }

  // Qwen-VL towers: native video chunks (cmd_video_native.cpp).
  int run_native(const VitModel& model, const VideoParams& vp, Executor& ex) const {
    const Precision asked = vp.encoder.precision;
    return run_native_video(model,
                            {.model_spec = model_spec, .video = tok.image, .output = output, .asked = asked,
                             .precision = runnable_precision_noted(asked), .every = every, .fps = fps,
                             .max_frames = max_frames, .chunk_frames = chunk_frames,
                             .cap_pixels_per_frame = cap_pixels_per_frame, .json = json,
                             .autorotate = !no_autorotate, .max_pixels = tok.max_pixels, .refused = not_native},
                            ex);
  }

  // One run's frame loop: what its hooks share (the model, the store, --check's inputs,
  // --overlay's sheet, the warnings given) and what they add up for the summary.
  struct Loop {
    const VideoCommand& cmd;
    const VideoParams& vp;
    const VitModel* model;  // null: patches only
    Executor& ex;
    TokenStore* store;      // --store, or null
    SeqId seq;
    const bool windowed, progress;
    // --check: each frame's decoded image and query, kept until its group comes out.
    std::deque<std::pair<ImageU8, Query>> check_inputs;
    // --overlay: a contact sheet of thumbnails, kept evenly spaced with bounded memory.
    std::optional<VideoSheet> sheet;
    std::optional<AtomicFile> sheet_file;
    int64_t frames_in = 0, frames_out = 0;
    std::set<std::string> warned_outside;  // each fixation or region off the frame, once
    bool warned_nonfinite = false;          // NaN embeddings: once a run (bad weights spoil every frame)
    RunTotals t;
    std::chrono::steady_clock::time_point t_run;

    Loop(const VideoCommand& c, const VideoParams& p, const VitModel* m, Executor& e, TokenStore* s, SeqId sq)
        : cmd(c), vp(p), model(m), ex(e), store(s), seq(sq),
          windowed(p.tokenize.foveation == Foveation::windows), progress(::isatty(2) && !c.json) {
      // The sheet's file is opened now, so that an unwritable path fails before the run, not after it.
      if (!cmd.overlay.empty()) sheet.emplace(), sheet_file.emplace(cmd.overlay);
    }
    const char* line_start() const { return progress ? "\n" : ""; }

    // A frame about to be pushed.
    void on_input(const VideoFrame& f, const Query& q) {
      warn_query_outside(q, f.image.width(), f.image.height(),
                         {.frame = static_cast<long long>(f.index), .seen = &warned_outside, .prefix = line_start()});
      if (cmd.check) check_inputs.emplace_back(f.image.clone(), q);
      if (sheet) sheet->add_frame(frames_in, f.image, f.index, f.pts_s, ex);
      ++frames_in;
    }

    // A frame out of the session (its group's last one finished).
    void finish_frame(FrameResult& r, const VideoRunStats& so_far) {
      nlohmann::json pf = frame_json(r, windowed, model != nullptr);
      if (windowed) t.kept_total += int64_t(r.rows.size());
      if (model && !warned_nonfinite)
        warned_nonfinite = warn_nonfinite(r.embeddings,
                                          "frame " + std::to_string(r.index) + "'s embeddings (later frames not checked)",
                                          line_start()) > 0;
      if (cmd.check) check(r, pf);
      if (store) store_frame(r, pf);
      if (sheet) sheet->add_tokens(frames_out, r.batch, r.recomputed, r.refresh);
      ++frames_out;
      if (cmd.json) t.per_frame.push_back(std::move(pf));  // ~2 KiB a frame: kept only when printed
      if (progress) show_progress(so_far);
    }

    // --check: the frame against a full encode of its decoded image.
    void check(const FrameResult& r, nlohmann::json& pf) {
      auto [image, q] = std::move(check_inputs.front());
      check_inputs.pop_front();
      double full_ms = 0;
      const RowCosines cos = check_frame(*model, vp, r, std::move(image), q, ex, full_ms);
      pf["full_ms"] = full_ms;
      pf["cosine"] = cos.mean;
      pf["cosine_min_token"] = cos.min;
      pf["error_mean"] = cos.error_mean;
      pf["error_max"] = cos.error_max;
      t.full_total += full_ms;
      t.cosine_total += cos.mean;
      t.cosine_min = std::min(t.cosine_min, cos.mean);
      t.cosine_min_token = std::min(t.cosine_min_token, cos.min);
    }

    // --store: the frame's embeddings (f16) rebound into the sequence.
    void store_frame(const FrameResult& r, nlohmann::json& pf) {
      const auto ts = std::chrono::steady_clock::now();
      const Tensor& e = r.embeddings;
      Tensor h(DType::f16, {e.dim(0), e.dim(1)});
      for (int64_t i = 0; i < e.numel(); ++i) h.data<uint16_t>()[i] = f32_to_f16(e.data<float>()[i]);
      const FrameDelta d = store->update_frame(seq, h);
      t.store_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ts).count();
      pf["store"] = {{"pages_written", d.pages_written},
                     {"pages_unchanged", d.pages_unchanged},
                     {"pages_bound", d.pages_bound},
                     {"pages_unbound", d.pages_unbound}};
    }

    void show_progress(const VideoRunStats& so_far) const {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_run).count();
      std::fprintf(stderr, "\rfovea video: %lld frames, %.1f fps, reuse %.1f%%   ", (long long)so_far.frames,
                   secs > 0 ? so_far.frames / secs : 0.0, 100.0 * so_far.reuse_rate());
      std::fflush(stderr);
    }
  };

  // What run_video is told: the input, the frames kept, each frame's query (--fixations), the
  // output and its metadata, and the loop's hooks.
  VideoRunOptions run_options(const Query& base_query, const FixationTrack* track, const std::string& norm_source,
                              Loop& loop) const {
    VideoRunOptions o;
    o.source = tok.image;
    o.max_frames = max_frames;
    o.keep = frame_sampler(every, fps);
    o.query = base_query;
    if (track)
      o.frame_query = [base_query, track](const VideoFrame& f) {
        Query q = base_query;
        if (const std::vector<Fixation>* fx = track->at(f.index)) q.fixations = *fx;
        return q;
      };
    o.output = output;
    o.model_name = model_spec;
    o.preprocessing_source = norm_source;
    o.on_input = [&loop](const VideoFrame& f, const Query& q) { loop.on_input(f, q); };
    const bool progress = loop.progress;
    o.on_warning = [this, progress](const std::string& w) {
      std::fprintf(stderr, "%sfovea: warning: %s: %s\n", progress ? "\n" : "", tok.image.c_str(), w.c_str());
    };
    return o;
  }

  // The session's parameters fitted to the model: its preprocessing (unless --mean / --std say
  // otherwise, as fovea encode does), its patch size, its window grid; returns where the
  // preprocessing came from.
  std::string fit_to_model(const VitModel& model, VideoParams& vp) const {
    const std::string norm_source = apply_model_preprocessing(tok, model.config().input, vp.tokenize.extract.norm);
    runnable_precision_noted(vp.encoder.precision);  // the warning; the encoder falls back by itself
    if (model.config().patch_px != vp.tokenize.patch_px) {
      if (patch_given) throw invalid_argument("--patch " + std::to_string(vp.tokenize.patch_px) + " does not match the model's " +
                                 std::to_string(model.config().patch_px) + "-px patches");
      vp.tokenize.patch_px = model.config().patch_px;
    }
    // Windows: the model's native grid (and the budget it implies) unless --window-grid / --budget say otherwise.
    if (vp.tokenize.foveation == Foveation::windows) {
      const TokenizeParams t = tok.params(Foveation::windows, model.config().grid);
      vp.tokenize.windows = t.windows;
      vp.tokenize.alloc.budget_tokens = t.alloc.budget_tokens;
    }
    return norm_source;
  }

  // --store: a token store holding one sequence of the budget's tokens (f16), reserved in `seq`.
  std::unique_ptr<TokenStore> make_store(const VitModel& model, const VideoParams& vp, SeqId& seq) const {
    StoreConfig sc;
    sc.dim = model.config().hidden;
    sc.dtype = DType::f16;
    const int64_t token_bytes = sc.dim * 2;
    sc.pool_pages = (int64_t(vp.tokenize.alloc.budget_tokens) * token_bytes + sc.page_bytes - 1) / sc.page_bytes + 2;
    auto store = std::make_unique<TokenStore>(sc, make_store_backend(store_backend));
    seq = store->reserve(vp.tokenize.alloc.budget_tokens);
    return store;
  }

  // A frame's entry in the --json summary.
  static nlohmann::json frame_json(const FrameResult& r, bool windowed, bool have_model) {
    const double ms = r.timings.total_ms();
    nlohmann::json pf = {{"index", r.index},
                         {"pts", r.pts_s},
                         {"tokens", r.batch.size()},
                         {"dirty_tiles", r.dirty_tiles},
                         {"tiles", r.tiles},
                         {"resampled_tokens", r.resampled_tokens},
                         {"recomputed_tokens", r.recomputed_tokens},
                         {"refresh", r.refresh},
                         {"layout_changed", r.layout_changed},
                         {"group_frames", r.group_frames},
                         {"ms", ms},
                         {"timings_ms",
                          {{"change", r.timings.change_ms},
                           {"pyramid", r.timings.pyramid_ms},
                           {"relevance", r.timings.relevance_ms},
                           {"allocate", r.timings.allocate_ms},
                           {"extract", r.timings.extract_ms},
                           {"encode", r.timings.encode_ms}}}};
    if (r.refresh) pf["refresh_reason"] = r.refresh_reason;
    if (windowed) {
      pf["tokens_kept"] = int64_t(r.rows.size());
      pf["windows"] = int64_t(r.batch.windows.size());
      pf["windows_reused"] = std::count(r.window_reused.begin(), r.window_reused.end(), uint8_t(1));
    }
    if (r.approximate) pf["drift_estimate"] = r.drift_estimate, pf["drift_estimate_max"] = r.drift_estimate_max;
    if (have_model) pf["encoder_work"] = r.encoder_work;
    return pf;
  }

  // The summary of a run: JSON (--json) or a few lines.
  int report(const VideoRunStats& run, RunTotals& t, const VideoInfo& info, const VideoReader& reader,
             const VideoParams& vp, const VitModel* model, const Executor& ex, const TokenStore* store,
             const VideoSheet* sheet) const {
    const bool have_model = model != nullptr;
    const bool windowed = vp.tokenize.foveation == Foveation::windows;
    const int64_t processed = run.frames, tokens_total = run.tokens, recomputed_total = run.recomputed_tokens;
    const double decode_ms = run.decode_ms, ms_total = run.session_ms;
    const bool approximate = run.approximate;

    nlohmann::json s;
    s["frames"] = processed;
    s["video"] = {{"path", tok.image},
                  {"width", info.width},
                  {"height", info.height},
                  {"fps", info.fps},
                  {"codec", info.codec},
                  {"container", info.container},
                  {"orientation", info.orientation},
                  {"rotation", std::string(orientation_name(info.orientation))},
                  {"rotation_applied", info.rotation_applied},
                  {"sample_aspect_ratio", std::to_string(info.sar_num) + ":" + std::to_string(info.sar_den)}};
    s["decode"] = {{"frames_decoded", reader.frames_decoded()},
                   {"corrupt_packets", reader.corrupt_packets()},
                   {"corrupt_frames", reader.corrupt_frames()},
                   {"timestamps_repaired", reader.timestamps_repaired()},
                   {"ms", decode_ms}};
    s["reuse"] = std::string(to_string(vp.reuse));
    s["foveation"] = std::string(to_string(vp.tokenize.foveation));
    if (windowed) s["window_grid"] = vp.tokenize.windows.grid, s["keep_covered"] = vp.tokenize.windows.keep_covered;
    s["group_frames"] = vp.group_frames;
    s["approximate"] = approximate;
    if (approximate)
      s["approximation"] =
          "incremental ViT reuse (token gating with the attention bound unless --attention-threshold off): embeddings "
          "approximate a full encode";
    s["tokens"] = tokens_total;
    if (windowed) s["tokens_kept"] = t.kept_total;
    s["recomputed_tokens"] = recomputed_total;
    s["reuse_rate"] = tokens_total ? 1.0 - double(recomputed_total) / double(tokens_total) : 0.0;
    s["mean_ms"] = ms_total / double(processed);
    s["threads"] = ex.threads();
    if (check) {
      s["mean_full_ms"] = t.full_total / double(processed);
      s["mean_cosine"] = t.cosine_total / double(processed);
      s["min_cosine"] = t.cosine_min;
      s["min_token_cosine"] = t.cosine_min_token;
      s["speedup_vs_full"] = ms_total > 0 ? t.full_total / ms_total : 0.0;
    }
    if (have_model) {
      s["encoder"] = {{"model", model_spec},
                      {"description", model->describe()},
                      {"random_weights", model->is_random()},
                      {"precision", std::string(to_string(runnable_precision(vp.encoder.precision)))},
                      {"token_threshold", token_threshold},
                      {"attention_threshold", vp.encoder.bound_attention
                                                  ? nlohmann::json(vp.encoder.attention_bound_threshold())
                                                  : nlohmann::json("off")},
                      {"mlp_threshold", vp.encoder.bound_attention && vp.encoder.mlp_gate_threshold() >= 0
                                            ? nlohmann::json(vp.encoder.mlp_gate_threshold())
                                            : nlohmann::json("off")},
                      {"refresh_tokens", vp.encoder.refresh_tokens}};
      if (runnable_precision(vp.encoder.precision) != vp.encoder.precision) s["encoder"]["precision_requested"] = precision;
    }
    if (store) {
      const StoreStats st = store->stats();
      s["store"] = {{"backend", std::string(store->backend_name())},
                    {"resident_pages", st.resident_pages},
                    {"bind_calls", st.bind_calls},
                    {"ms", t.store_ms}};
    }
    s["output"] = output;
    if (sheet) s["overlay"] = {{"path", overlay}, {"frames", sheet->shown_frames()}};
    s["per_frame"] = std::move(t.per_frame);
    if (json) {
      std::cout << json_text(s) << '\n';
    } else {
      std::printf("fovea video: %s (%dx%d %s, %.3g fps)\n", tok.image.c_str(), info.width, info.height,
                  info.codec.c_str(), info.fps);
      std::printf("  frames: %lld processed of %lld decoded; corrupt packets %lld\n", (long long)processed,
                  (long long)reader.frames_decoded(), (long long)reader.corrupt_packets());
      std::printf("  reuse %s: %.1f%% of tokens reused, %.2f ms per frame (decode %.2f ms)%s\n",
                  to_string(vp.reuse).data(), 100.0 * s["reuse_rate"].get<double>(), s["mean_ms"].get<double>(),
                  decode_ms / double(processed), approximate ? " [approximate: incremental ViT]" : "");
      if (check)
        std::printf("  check: full re-encode %.2f ms per frame (%.1fx), mean cosine %.5f (worst frame %.5f, worst token "
                    "%.5f)\n",
                    s["mean_full_ms"].get<double>(), s["speedup_vs_full"].get<double>(),
                    s["mean_cosine"].get<double>(), t.cosine_min, t.cosine_min_token);
      if (windowed)
        std::printf("  wrote %s (%lld tokens handed on of %lld encoded)\n", output.c_str(), (long long)t.kept_total,
                    (long long)tokens_total);
      else
        std::printf("  wrote %s (%lld tokens)\n", output.c_str(), (long long)tokens_total);
      if (sheet) std::printf("  wrote %s\n", overlay.c_str());
    }
    return 0;
  }
  // Every argument checked, before any work: the session's parameters.
  VideoParams video_params(Query& base_query) const {
    if (tok.uniform) throw invalid_argument("--uniform has no video mode");
    if (tok.inputs.size() > 1)  // before, the others were silently ignored
      throw invalid_argument("fovea video takes one input, got " + std::to_string(tok.inputs.size()) + " (run it once per video)");
    VideoParams vp;
    vp.tokenize = tok.params();
    base_query = tok.query();
    if (!fixations_csv.empty() && !tok.fixations.empty())
      throw invalid_argument("--fixation and --fixations are exclusive");
    if (every < 0 || (every_given && every == 0)) throw invalid_argument("--every must be >= 1");
    if (fps < 0 || !std::isfinite(fps) || (fps_given && fps == 0)) throw invalid_argument("--fps must be > 0");
    if (max_frames < 0) throw invalid_argument("--max-frames must be >= 0 (0: every frame)");
    if (keyframe < 0) throw invalid_argument("--keyframe must be >= 0");
    if (!(threshold >= 0) || !std::isfinite(threshold)) throw invalid_argument("--threshold must be a number >= 0");
    if (!(token_threshold >= 0) || !std::isfinite(token_threshold)) throw invalid_argument("--token-threshold must be >= 0");
    if (!(hysteresis >= 0)) throw invalid_argument("--hysteresis must be >= 0");
    if (!(refresh_fraction > 0 && refresh_fraction <= 1)) throw invalid_argument("--refresh-fraction must be in (0, 1]");
    const bool have_model = !model_spec.empty();
    if (check && !have_model) throw invalid_argument("--check compares embeddings: it needs --model");
    if (!store_backend.empty() && !have_model) throw invalid_argument("--store holds embeddings: it needs --model");
    if (output.empty() && !decode_only) throw invalid_argument("-o OUT.safetensors is required");
    if (decode_only && !overlay.empty()) throw invalid_argument("--overlay draws the tokens: it does not go with --decode-only");
    if (have_model && vp.tokenize.extract.dtype == DType::u8)
      throw invalid_argument("--dtype u8 patches are not normalised; a model needs f32 or f16");
    const bool windowed = vp.tokenize.foveation == Foveation::windows;
    if (windowed) check_windows_options();
    vp.reuse = reuse.empty() ? (have_model && !windowed ? Reuse::incremental : Reuse::exact)
               : reuse == "off" ? Reuse::off
               : reuse == "exact" ? Reuse::exact
                                  : Reuse::incremental;
    vp.change_threshold = threshold;
    vp.keyframe_interval = keyframe;
    vp.layout_hysteresis = hysteresis;
    vp.refresh_fraction = refresh_fraction;
    if (group < 1 || group > 1024) throw invalid_argument("--group must be 1..1024 frames");
    vp.group_frames = group;
    vp.encoder.precision = precision == "bf16" ? Precision::bf16 : Precision::fp32;
    vp.encoder.token_threshold = token_threshold;
    if (attention_threshold == "off") {
      vp.encoder.bound_attention = false;
    } else if (!attention_threshold.empty()) {
      char* end = nullptr;
      const float v = std::strtof(attention_threshold.c_str(), &end);
      if (end == attention_threshold.c_str() || *end || !(v >= 0) || !std::isfinite(v))
        throw invalid_argument("--attention-threshold must be a number >= 0 or off");
      vp.encoder.attention_threshold = v;
    }
    if (mlp_threshold == "off") {
      vp.encoder.mlp_threshold = -2;
    } else if (!mlp_threshold.empty()) {
      char* end = nullptr;
      const float v = std::strtof(mlp_threshold.c_str(), &end);
      if (end == mlp_threshold.c_str() || *end || !(v >= 0) || !std::isfinite(v))
        throw invalid_argument("--mlp-threshold must be a number >= 0 or off");
      vp.encoder.mlp_threshold = v;
    }
    if (refresh_tokens < 0) throw invalid_argument("--refresh-tokens must be >= 0");
    vp.encoder.refresh_tokens = refresh_tokens;
    if (!(drift_refresh >= 0) || !std::isfinite(drift_refresh)) throw invalid_argument("--drift-refresh must be a number >= 0");
    vp.drift_refresh = drift_refresh;
    if (!(exact_above_work >= 0) || !std::isfinite(exact_above_work))
      throw invalid_argument("--exact-above-work must be a number >= 0");
    vp.exact_above_work = exact_above_work;
    return vp;
  }

  // --check of one frame (its full encode's time in full_ms).
  static RowCosines check_frame(const VitModel& model, const VideoParams& vp, const FrameResult& r, ImageU8 image,
                                const Query& q, Executor& ex, double& full_ms) {
    // The full foveated pipeline on the decoded frame, from scratch: its time; and the
    // session's layout encoded in full from that frame's pyramid: the reference embeddings.
    const bool windowed = vp.tokenize.foveation == Foveation::windows;
    const auto tf = std::chrono::steady_clock::now();
    Tokenization full = tokenize(std::move(image), q, vp.tokenize, ex);
    const EncodeParams ep{.precision = vp.encoder.precision, .image_width = full.pyramid.width(),
                          .image_height = full.pyramid.height()};
    Encoding fe = windowed ? encode_tokens(model, full.batch, ep, ex)
                           : encode(model, full.batch.patches, full.batch.positions, ep, ex);
    full_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - tf).count();
    RowCosines cos;
    if (windowed) {
      // Windows with reuse off: every window of the frame's plan encoded from that frame's
      // pixels (the session's plan, kept by hysteresis, when it differs from a fresh one's).
      Encoding& we = fe;
      if (!same_windows(full.batch, r.batch)) {
        WindowPlan plan;
        plan.windows = r.batch.windows;
        plan.patch_px = r.batch.patch_px;
        plan.image_width = full.pyramid.width(), plan.image_height = full.pyramid.height();
        const uint8_t* c = r.batch.covered.data<uint8_t>();
        for (const TokenWindow& w : plan.windows) plan.covered.emplace_back(c, c + w.tokens()), c += w.tokens();
        we = encode_tokens(model, extract_windows(full.pyramid, plan, vp.tokenize.extract, ex), ep, ex);
      }
      cos = row_cosines(r.embeddings, we.embeddings);
    } else if (full.allocation.layout.tokens == r.allocation->layout.tokens) {
      cos = row_cosines(r.embeddings, fe.embeddings);
    } else {
      const TokenBatch b = extract(full.pyramid, *r.allocation, vp.tokenize.extract, ex);
      const Encoding re = encode(model, b.patches, b.positions, ep, ex);
      cos = row_cosines(r.embeddings, re.embeddings);
    }
    return cos;
  }

  bool patch_given = false, every_given = false, fps_given = false, group_given = false;

  // --foveation windows: each frame's changed windows are encoded in one call, so the options
  // that steer the mixed foveation's frame groups do not apply.
  void check_windows_options() const {
    if (group_given) throw invalid_argument("--group encodes frames of the mixed foveation together; --foveation windows "
                                            "encodes each frame's changed windows in one call");
    if (drift_refresh != VideoParams{}.drift_refresh || exact_above_work != VideoParams{}.exact_above_work)
      throw invalid_argument(std::string(drift_refresh != VideoParams{}.drift_refresh ? "--drift-refresh" : "--exact-above-work") +
                             " steers the mixed foveation's frame groups; it does not apply to --foveation windows");
  }
  // The same windows (boxes and grids) in two windowed batches.
  static bool same_windows(const TokenBatch& a, const TokenBatch& b) {
    if (a.windows.size() != b.windows.size()) return false;
    for (size_t i = 0; i < a.windows.size(); ++i)
      if (a.windows[i].box != b.windows[i].box || a.windows[i].grid_x != b.windows[i].grid_x ||
          a.windows[i].grid_y != b.windows[i].grid_y || a.windows[i].level != b.windows[i].level)
        return false;
    return a.covered.size_bytes() == b.covered.size_bytes() &&
           std::memcmp(a.covered.bytes(), b.covered.bytes(), a.covered.size_bytes()) == 0;
  }
};

Runner setup_video(CLI::App& sub) {
  auto cmd = std::make_shared<VideoCommand>();
  cmd->tok.add(sub);
  sub.get_option("image")->description("Input video: any container and codec ffmpeg reads (y4m included)");
  CLI::Option* patch = sub.get_option("--patch");
  sub.add_option("--fixations", cmd->fixations_csv,
                 "Per-frame fixations: CSV lines frame,x,y (a frame keeps the last listed fixations)")
      ->type_name("FILE.csv");
  sub.add_option("--model,-m", cmd->model_spec, "ViT checkpoint or random:vit-b16 (without: patches only)")
      ->type_name("CKPT");
  sub.add_option("--precision", cmd->precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  auto* every = sub.add_option("--every", cmd->every, "Process every N-th decoded frame")->type_name("N");
  auto* fps = sub.add_option("--fps", cmd->fps, "Process frames at this rate (by pts)")->type_name("F");
  every->excludes(fps);
  sub.add_option("--max-frames", cmd->max_frames, "Stop after N processed frames (0, the default: every frame)")->type_name("N");
  sub.add_option("--reuse", cmd->reuse,
                 "incremental (default with a model: a token's ViT layer states reused while they would move by less than "
                 "--token-threshold; approximate), exact (patches and "
                 "patch embeddings reused, full ViT), off (every frame from scratch). With --foveation windows (a base "
                 "view and native windows, each its own sequence): exact (the default: a window whose pixels did not "
                 "change hands on its previous outputs, a changed one is encoded again), incremental (a changed window "
                 "through its own incremental ViT; no class tokens), off")
      ->check(CLI::IsMember({"incremental", "exact", "off"}));
  sub.add_option("--keyframe", cmd->keyframe, "Full refresh every K-th processed frame (0: only on scene cuts)")
      ->type_name("K");
  sub.add_option("--threshold", cmd->threshold,
                 "Tile change test: mean |difference| over a 4x4 block, 8-bit levels (default 8)")
      ->type_name("T");
  sub.add_option("--token-threshold", cmd->token_threshold,
                 "Incremental ViT, the fidelity knob: relative L2 change of a token's layer input, or of its "
                 "residual stream through attention, that recomputes it (default 0.07; smaller: closer to a full "
                 "encode, slower)")
      ->type_name("E");
  sub.add_option("--attention-threshold", cmd->attention_threshold,
                 "Advanced: the attention bound's threshold (default: --token-threshold / 0.7, 0.1 at its default); "
                 "off: kept tokens ignore other tokens' new keys and values (faster, unbounded drift on trained towers)")
      ->type_name("E|off");
  sub.add_option("--mlp-threshold", cmd->mlp_threshold,
                 "Advanced: a token recomputed for its input or attention keeps its MLP's last output while the MLP's "
                 "input moved by less than E (relative L2); off (the default): every such MLP runs")
      ->type_name("E|off");
  sub.add_option("--drift-refresh", cmd->drift_refresh,
                 "Advanced: start a frame group with a full encode when the encoder's drift estimate of the last "
                 "frame exceeds E (0: never)")
      ->type_name("E");
  sub.add_option("--exact-above-work", cmd->exact_above_work,
                 "Advanced: when a frame group's reused frames did more than W of a full encode's work, encode the "
                 "next three groups exactly, and the groups after them that change as much, then try reuse again "
                 "(0: never; default 0.45)")
      ->type_name("W");
  sub.add_option("--refresh-tokens", cmd->refresh_tokens,
                 "Advanced: per frame and layer, also recompute the K kept tokens whose unapplied change is largest "
                 "(default 0)")
      ->type_name("K");
  sub.add_option("--hysteresis", cmd->hysteresis,
                 "Relative change of the relevance map that re-allocates the layout (default 0.1; 0: every frame)");
  sub.add_option("--refresh-fraction", cmd->refresh_fraction,
                 "Fraction of dirty tiles that counts as a scene cut (full refresh; default 0.5)");
  auto* group = sub.add_option("--group", cmd->group,
                 "Incremental ViT: encode G frames per pass, layer-major (weights read once per group; the same "
                 "results, G-1 frames more latency; default 8)")
      ->type_name("G");
  sub.add_flag("--check", cmd->check,
               "Also run the full foveated pipeline on every frame: its time and the cosine of the reused embeddings");
  sub.add_option("--store", cmd->store_backend, "Delta-rebind each frame's embeddings in a token store")
      ->check(CLI::IsMember({"host", "vulkan", "vulkan-image"}))
      ->type_name("host|vulkan|vulkan-image");
  sub.add_option("-o,--output", cmd->output, "Output safetensors (embeddings or patches, frame_offsets, positions, "
                                             "levels, pts, recomputed)")
      ->type_name("OUT.safetensors");
  sub.add_option("--overlay", cmd->overlay,
                 "Write a PNG contact sheet: 12 frames spread over the run, token borders coloured by level, "
                 "recomputed tokens tinted magenta, captions #frame time recomputed/tokens (R: refresh)")
      ->type_name("PNG");
  auto* chunk = sub.add_option("--chunk-frames", cmd->chunk_frames,
                                "Native-resolution towers (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): frames a chunk, each chunk "
                                "one video of its own grid (a multiple of the temporal patch; 0: the whole clip; "
                                "default 16)")
                    ->type_name("N");
  auto* cap = sub.add_flag("--cap-pixels-per-frame", cmd->cap_pixels_per_frame,
                           "Qwen3-VL: cap each frame's pixels as qwen-vl-utils does (default: the video processor's "
                           "budget over all frames of a chunk)");
  sub.add_flag("--json", cmd->json, "Print a JSON summary with one entry per frame");
  sub.add_flag("--decode-only", cmd->decode_only, "Only decode (and convert to RGB) every frame, and time it");
  sub.add_flag("--no-autorotate", cmd->no_autorotate,
               "Keep frames as stored: ignore the stream's rotation (display matrix), which is applied by default as "
               "players and ffmpeg do");
  cmd->exec.add(sub);
  sub.footer(
      "Examples:\n"
      "  fovea video clip.mp4 --model random:vit-b16 --fixation 320,180 -o tokens.safetensors --json\n"
      "  fovea video clip.mp4 --model random:vit-b16 -o tokens.safetensors --overlay sheet.png\n"
      "  fovea video clip.mp4 --model vit/ --foveation windows --fixation 320,180 -o tokens.safetensors\n"
      "  fovea video clip.mp4 --fixations gaze.csv --every 2 --max-frames 100 -o patches.safetensors");
  std::vector<CLI::Option*> not_native;  // what a native tower's video chunks do not take
  for (const char* name : {"--fixation", "--region", "--fixations", "--budget", "--patch", "--reuse", "--keyframe",
                           "--group", "--token-threshold", "--attention-threshold", "--mlp-threshold", "--check", "--store", "--overlay",
                           "--decode-only", "--foveation", "--window-grid"})
    if (CLI::Option* o = sub.get_option_no_throw(name)) not_native.push_back(o);
  return [cmd, patch, every, fps, chunk, cap, not_native, group] {
    cmd->group_given = group->count() > 0;
    cmd->native_options_given = chunk->count() > 0 || cap->count() > 0;
    for (CLI::Option* o : not_native)
      if (o->count() > 0) cmd->not_native.push_back(o->get_name());
    cmd->patch_given = patch && patch->count() > 0;
    cmd->every_given = every->count() > 0;
    cmd->fps_given = fps->count() > 0;
    return cmd->run();
  };
}

Registration reg_video{{"video", "Tokenize (and encode) a video, re-doing only what changed between frames", 30, setup_video}};

}  // namespace
}  // namespace fovea::cli
