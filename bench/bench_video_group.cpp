// The incremental ViT's frame groups, timed in one process with the competitors interleaved:
//
//   build/bench/bench_video_group CLIP --fixation X,Y [--budget 273] [--frames 41] [--groups 1,4,8,16]
//                                 [--model random:vit-b16] [--precision fp32|bf16] [--threads 2] [--reps 3]
//
// The clip goes once through the session's front end (VideoSession without a model: change
// test, pyramid update, relevance, layout, patch reuse), which gives every frame's patches,
// positions, previous rows and dirty patches. Then, per repetition, for each G in turn (and
// "full": fovea::encode of every frame from scratch, the encoder part of a full foveated
// re-encode): a fresh IncrementalEncoder encodes frame 0 (not timed) and the other frames in
// groups of G, refreshes alone, as VideoSession does. Per G it prints one JSON line with the
// encoder time per frame (min and median over repetitions) and its ratio to G = 1 and to full,
// and checks that every G gives the G = 1 embeddings (max |difference|; 0 when bit-identical).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/exec.hpp"
#include "fovea/incremental_encoder.hpp"
#include "fovea/video.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct FrameInput {
  fovea::Tensor patches, positions;
  std::vector<int64_t> prev_row;
  std::vector<uint8_t> dirty;
  bool refresh = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Options {
  std::string clip, model_spec = "random:vit-b16", precision = "fp32";
  float fx = -1, fy = -1;
  int budget = 273, frames = 41, threads = 2, reps = 3;
  std::vector<int> groups;
};

Options parse_args(int argc, char** argv) {
  Options o;
  std::string groups_arg = "1,4,8,16";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw fovea::Error(fovea::Errc::invalid_argument, a + " needs a value");
      return argv[++i];
    };
    if (a == "--fixation") {
      const std::string v = next();
      if (std::sscanf(v.c_str(), "%f,%f", &o.fx, &o.fy) != 2)
        throw fovea::Error(fovea::Errc::invalid_argument, "--fixation X,Y");
    } else if (a == "--budget") o.budget = std::stoi(next());
    else if (a == "--frames") o.frames = std::stoi(next());
    else if (a == "--groups") groups_arg = next();
    else if (a == "--model") o.model_spec = next();
    else if (a == "--precision") o.precision = next();
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (o.clip.empty() && a[0] != '-') o.clip = a;
    else throw fovea::Error(fovea::Errc::invalid_argument, "unknown argument " + a);
  }
  if (o.clip.empty()) throw fovea::Error(fovea::Errc::invalid_argument, "usage: bench_video_group CLIP --fixation X,Y ...");
  std::stringstream ss(groups_arg);
  for (std::string g; std::getline(ss, g, ',');) o.groups.push_back(std::stoi(g));
  return o;
}

// The clip through the session's front end: every frame's encoder inputs, the frames' size and
// the front end's time.
struct Clip {
  std::vector<FrameInput> in;
  int width = 0, height = 0;
  double front_ms = 0;
};

Clip front_end(const Options& o, const fovea::VitModel& model, fovea::Executor& exec) {
  fovea::VideoParams vp;
  vp.tokenize.alloc.budget_tokens = o.budget;
  vp.tokenize.patch_px = model.config().patch_px;
  vp.reuse = fovea::Reuse::exact;
  fovea::VideoSession session(vp, nullptr, exec);
  fovea::VideoReader reader = fovea::VideoReader::open(o.clip);
  fovea::Query q;
  if (o.fx >= 0) q.fixations.push_back({o.fx, o.fy, 1.0f});
  Clip c;
  fovea::VideoFrame frame;
  while (int(c.in.size()) < o.frames && reader.read(frame)) {
    c.width = frame.image.width(), c.height = frame.image.height();
    const auto t0 = Clock::now();
    fovea::FrameResult r = session.process(std::move(frame.image), q, frame.index, frame.pts_s);
    c.front_ms += ms_since(t0);
    frame.image = std::move(r.recycled);
    FrameInput f;
    f.patches = std::move(r.batch.patches);
    f.positions = std::move(r.batch.positions);
    f.prev_row = std::move(r.previous_row);
    f.dirty = std::move(r.recomputed);  // without a model: the resampled tokens
    f.refresh = r.refresh;
    if (f.refresh) f.prev_row.clear();
    c.in.push_back(std::move(f));
  }
  if (c.in.size() < 2) throw fovea::Error(fovea::Errc::invalid_argument, o.clip + ": fewer than 2 frames");
  return c;
}

// The encoder passes over the clip's frames.
struct Passes {
  const fovea::VitModel& model;
  fovea::Executor& exec;
  const Clip& clip;
  fovea::IncrementalParams ip;
  int64_t timed = 0;  // the frames timed: all but the first

  Passes(const fovea::VitModel& m, fovea::Executor& e, const Clip& c, const std::string& precision)
      : model(m), exec(e), clip(c), timed(int64_t(c.in.size()) - 1) {
    ip.precision = precision == "bf16" ? fovea::Precision::bf16 : fovea::Precision::fp32;
    ip.image_width = c.width, ip.image_height = c.height;
  }
  static fovea::IncrementalFrame as_frame(const FrameInput& f) {
    return fovea::IncrementalFrame{.patches = &f.patches, .positions = &f.positions, .prev_row = f.prev_row,
                                   .patch_dirty = f.dirty};
  }
  // fovea::encode of every timed frame from scratch; ms per timed frame.
  double full() {
    double ms = 0;
    const fovea::EncodeParams ep{.precision = ip.precision, .image_width = clip.width, .image_height = clip.height};
    for (size_t i = 1; i < clip.in.size(); ++i) {
      const auto t0 = Clock::now();
      fovea::Encoding e = fovea::encode(model, clip.in[i].patches, clip.in[i].positions, ep, exec);
      ms += ms_since(t0);
    }
    return ms / double(timed);
  }
  // One pass with group size G (0: full encodes); returns ms per timed frame and the embeddings.
  double pass(int G, std::vector<fovea::Tensor>* out) {
    if (G == 0) return full();
    const std::vector<FrameInput>& in = clip.in;
    double ms = 0;
    fovea::IncrementalEncoder enc(model);
    fovea::IncrementalResult r0 = enc.encode(in[0].patches, in[0].positions, {}, {}, ip, exec);
    if (out) out->push_back(std::move(r0.embeddings));
    for (size_t i = 1; i < in.size();) {
      std::vector<fovea::IncrementalFrame> group;
      if (in[i].refresh) {
        enc.reset();
        group.push_back(as_frame(in[i++]));
      } else {
        while (i < in.size() && int(group.size()) < G && !in[i].refresh) group.push_back(as_frame(in[i++]));
      }
      const auto t0 = Clock::now();
      std::vector<fovea::IncrementalResult> rs = enc.encode_group(group, ip, exec);
      ms += ms_since(t0);
      if (out)
        for (fovea::IncrementalResult& r : rs) out->push_back(std::move(r.embeddings));
    }
    return ms / double(timed);
  }
};

// /proc/loadavg's three numbers (the first -1 when unreadable).
std::array<double, 3> load_average() {
  std::array<double, 3> load = {0, 0, 0};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    std::fclose(f);
  }
  return load;
}

// One JSON line per G: its times against full encodes and G = 1, and its embeddings' largest
// difference from the first G's.
void report(const Options& o, const Clip& c, int64_t timed, std::map<int, std::vector<fovea::Tensor>>& emb,
            std::map<int, std::vector<double>>& times) {
  const std::vector<fovea::Tensor>& base = emb[o.groups.front()];
  const std::array<double, 3> load = load_average();
  const double full_min = *std::min_element(times[0].begin(), times[0].end());
  const double full_med = median(times[0]);
  const double g1_med = times.count(1) ? median(times[1]) : 0;
  for (int G : o.groups) {
    double maxdiff = 0;
    for (size_t i = 0; i < base.size(); ++i)
      for (int64_t k = 0; k < base[i].numel(); ++k)
        maxdiff = std::max(maxdiff, double(std::fabs(base[i].data<float>()[k] - emb[G][i].data<float>()[k])));
    const double mn = *std::min_element(times[G].begin(), times[G].end()), md = median(times[G]);
    nlohmann::json j = {{"clip", o.clip},
                        {"group", G},
                        {"precision", o.precision},
                        {"threads", o.threads},
                        {"frames_timed", timed},
                        {"encode_ms_min", mn},
                        {"encode_ms_median", md},
                        {"full_encode_ms_min", full_min},
                        {"full_encode_ms_median", full_med},
                        {"speedup_vs_full_median", md > 0 ? full_med / md : 0},
                        {"speedup_vs_group1_median", md > 0 && g1_med > 0 ? g1_med / md : 0},
                        {"max_abs_diff_vs_first_group", maxdiff},
                        {"front_end_ms", c.front_ms / double(c.in.size())},
                        {"load", {load[0], load[1], load[2]}}};
    std::printf("%s\n", j.dump().c_str());
  }
}

int run(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  fovea::quiet_ffmpeg_log();
  fovea::Executor exec({.threads = o.threads});
  const fovea::VitModel model = fovea::VitModel::load(o.model_spec);
  const Clip clip = front_end(o, model, exec);  // once
  Passes passes(model, exec, clip, o.precision);

  // Warm-up (oneDNN primitives for every row count, bf16 weights) and the embeddings to compare.
  std::map<int, std::vector<fovea::Tensor>> emb;
  for (int G : o.groups) passes.pass(G, &emb[G]);
  passes.pass(0, nullptr);
  std::map<int, std::vector<double>> times;
  for (int r = 0; r < o.reps; ++r) {
    for (int G : o.groups) times[G].push_back(passes.pass(G, nullptr));
    times[0].push_back(passes.pass(0, nullptr));
  }
  report(o, clip, passes.timed, emb, times);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As the CLI (tools/fovea/main.cpp): OpenMP's default spin-waiting takes the shared cores'
  // time from other work; libgomp reads the policy at load time, so re-execute once with it.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0)
    ::execv("/proc/self/exe", argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_video_group: error: %s\n", e.what());
    return 1;
  }
}
