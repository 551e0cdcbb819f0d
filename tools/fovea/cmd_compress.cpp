// fovea compress EMB.safetensors --codec SPEC [--train FILES...] [--codebook CB] [--merge COS] -o OUT
// fovea compress --report EMB... [--train FILES...] [--codec SPEC]... [--json] [--plot PNG]
// fovea decompress OUT.safetensors [--codebook CB] -o EMB.safetensors
//
// Token compression. A compressed file holds `codes` [N, bytes_per_token] U8, the
// tokens' positions and levels, and in its metadata the codec and the BLAKE2b hash of the
// codebook it needs; the codebook (what the codec learned) lives in its own file, trained once
// per model with --train.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "command.hpp"
#include "compress/plot.hpp"
#include "fovea/compress.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/safetensors.hpp"

namespace fovea::cli {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

Error bad_file(const std::string& m) { return Error(Errc::corrupt_data, m); }

// An embeddings file as fovea encode writes it.
struct Embeddings {
  std::string path;
  Tensor embeddings;  // [N, D] f32
  Tensor positions;   // [N, 4] f32, or empty
  Tensor levels;      // [N] i32, or empty
  std::map<std::string, std::string> metadata;
  std::string model() const {
    auto it = metadata.find("model");
    return it == metadata.end() ? "" : it->second;
  }
};

Embeddings load_embeddings(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  Embeddings e;
  e.path = path;
  e.metadata = f.metadata();
  const auto* emb = f.find("embeddings");
  if (!emb) {
    if (f.find("codes"))
      throw bad_file(path + ": holds compressed codes, not embeddings (run 'fovea decompress' first)");
    throw bad_file(path + ": no 'embeddings' tensor (write one with 'fovea encode')");
  }
  if (!emb->dtype_known || (emb->dtype != DType::f32 && emb->dtype != DType::f16 && emb->dtype != DType::bf16))
    throw bad_file(path + ": 'embeddings' must be F32, F16 or BF16, not " + emb->dtype_name);
  if (emb->shape.size() != 2 || emb->shape[1] < 1)
    throw bad_file(path + ": 'embeddings' must be [N, D], got rank " + std::to_string(emb->shape.size()));
  e.embeddings = f.load_f32(*emb);
  const int64_t n = e.embeddings.dim(0);
  if (const auto* p = f.find("positions")) {
    if (p->dtype != DType::f32 || p->shape != std::vector<int64_t>{n, 4})
      throw bad_file(path + ": 'positions' must be F32 [" + std::to_string(n) + ", 4]");
    e.positions = f.load(*p);
  }
  if (const auto* l = f.find("levels")) {
    if (l->dtype != DType::i32 || l->shape != std::vector<int64_t>{n})
      throw bad_file(path + ": 'levels' must be I32 [" + std::to_string(n) + "]");
    e.levels = f.load(*l);
  }
  const float* x = e.embeddings.data<float>();
  for (int64_t i = 0; i < e.embeddings.numel(); ++i)
    if (!std::isfinite(x[i])) throw bad_file(path + ": 'embeddings' holds a non-finite value at element " + std::to_string(i));
  return e;
}

// Training vectors: every --train file, concatenated; one D and one model.
struct TrainingSet {
  Tensor x;
  std::string model;
  int64_t files = 0;
};

TrainingSet load_training(const std::vector<std::string>& paths, int64_t dim) {
  TrainingSet t;
  std::vector<Embeddings> all;
  int64_t n = 0;
  for (const std::string& p : paths) {
    Embeddings e = load_embeddings(p);
    if (e.embeddings.dim(1) != dim)
      throw bad_file(p + ": training embeddings have D = " + std::to_string(e.embeddings.dim(1)) + ", the input has D = " +
                     std::to_string(dim));
    if (!all.empty() && e.model() != all.front().model())
      throw bad_file(p + ": training embeddings come from model '" + e.model() + "', " + all.front().path + " from '" +
                     all.front().model() + "'");
    n += e.embeddings.dim(0);
    all.push_back(std::move(e));
  }
  t.x = Tensor(DType::f32, {n, dim});
  int64_t at = 0;
  for (const Embeddings& e : all) {
    std::memcpy(t.x.bytes() + at, e.embeddings.bytes(), e.embeddings.size_bytes());
    at += int64_t(e.embeddings.size_bytes());
  }
  t.model = all.empty() ? "" : all.front().model();
  t.files = int64_t(all.size());
  return t;
}

void train_codec(Codec& c, const TrainingSet& t, bool quiet) {
  if (t.x.dim(0) < c.recommended_train_vectors() && t.x.dim(0) >= c.min_train_vectors() && !quiet)
    std::fprintf(stderr, "fovea: note: training %s on %lld vectors; %lld or more are recommended\n", c.spec().c_str(),
                 (long long)t.x.dim(0), (long long)c.recommended_train_vectors());
  c.train(t.x);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

struct CompressCommand {
  std::vector<std::string> inputs, train, codecs;
  std::string codebook, output, plot;
  float merge = -2;  // < -1: no merge
  bool report = false, json = false, trust_faiss = false;
  int reps = 3, threads = 1;

  // The tokens compress writes, the input's or with --merge the merged ones, and their codes.
  struct Coded {
    int64_t n_in = 0;  // the input's tokens
    bool did_merge = false;
    MergeResult merged;  // did_merge only
    Tensor codes;        // [n, bytes_per_token] u8
    double encode_ms = 0;
  };

  int run() const {
    if (report) return run_report();
    check_compress_options();
    Embeddings in = load_embeddings(inputs[0]);
    std::string trained_on;  // what --train trained on, for the report
    const std::unique_ptr<Codec> codec = compress_codec(in, trained_on);
    const Coded c = code_tokens(in, *codec);
    write_compressed(in, *codec, c);
    const nlohmann::json j = compress_json(in, *codec, c, trained_on);
    if (json) {
      std::cout << json_text(j) << '\n';
      return 0;
    }
    print_compress(in, *codec, c, trained_on);
    return 0;
  }

  void check_compress_options() const {
    if (inputs.size() != 1)
      throw Error(Errc::invalid_argument, "compress takes one embeddings file (several only with --report)");
    if (output.empty()) throw Error(Errc::invalid_argument, "compress needs -o OUT.safetensors");
    if (codecs.size() > 1) throw Error(Errc::invalid_argument, "compress takes one --codec (several only with --report)");
    if (codecs.empty() && codebook.empty()) throw Error(Errc::invalid_argument, "compress needs --codec SPEC (or a --codebook)");
    if (!plot.empty()) throw Error(Errc::invalid_argument, "--plot goes with --report");
  }

  // The codec: trained on --train (and its codebook saved), loaded from --codebook, or one that
  // learns nothing.
  std::unique_ptr<Codec> compress_codec(const Embeddings& in, std::string& trained_on) const {
    const int64_t dim = in.embeddings.dim(1);
    std::unique_ptr<Codec> codec;
    if (!train.empty()) {
      if (codecs.empty()) throw Error(Errc::invalid_argument, "--train needs --codec SPEC: what to train");
      codec = make_codec(codecs[0], dim);
      codec->set_threads(threads);
      if (!codec->needs_training()) {
        std::fprintf(stderr, "fovea: note: %s learns nothing; --train is ignored\n", codec->spec().c_str());
      } else {
        if (codebook.empty())
          throw Error(Errc::invalid_argument, "--train needs --codebook CB.safetensors to save what " + codec->spec() +
                                                  " learns (decompress needs it)");
        const TrainingSet t = load_training(train, dim);
        if (!t.model.empty() && !in.model().empty() && t.model != in.model())
          throw bad_file(inputs[0] + " comes from model '" + in.model() + "', the training embeddings from '" + t.model + "'");
        train_codec(*codec, t, json);
        save_codebook(*codec, codebook,
                      {{"model", t.model}, {"train_vectors", std::to_string(t.x.dim(0))},
                       {"train_files", std::to_string(t.files)}});
        trained_on = std::to_string(t.x.dim(0)) + " vectors from " + std::to_string(t.files) + " file(s)";
      }
    } else if (!codebook.empty()) {
      std::map<std::string, std::string> cb_meta;
      codec = load_codebook(codebook, &cb_meta, {.trust_faiss = trust_faiss});
      codec->set_threads(threads);
      if (!codecs.empty() && make_codec(codecs[0], codec->dim())->spec() != codec->spec())
        throw bad_file(codebook + " is a " + codec->spec() + " codebook, not " + codecs[0]);
      check_codebook(*codec, cb_meta, in);
    } else {
      codec = make_codec(codecs[0], dim);
      if (codec->needs_training())
        throw Error(Errc::invalid_argument, codec->spec() + " must be trained: give --train FILES... and --codebook "
                                                          "CB.safetensors (to save it), or an existing --codebook");
    }
    return codec;
  }

  // The merge (if asked) changes N; the codec then codes the merged tokens.
  Coded code_tokens(const Embeddings& in, const Codec& codec) const {
    Coded c;
    c.n_in = in.embeddings.dim(0);
    if (merge >= -1) {
      if (in.positions.rank() == 0) throw bad_file(inputs[0] + ": --merge needs the tokens' 'positions'");
      c.merged = merge_siblings(in.embeddings, in.positions, {.min_cosine = merge});
      c.did_merge = true;
    }
    const Tensor& x = c.did_merge ? c.merged.embeddings : in.embeddings;
    const auto t0 = Clock::now();
    c.codes = codec.encode(x);
    c.encode_ms = ms_since(t0);
    return c;
  }

  static std::string codebook_hash(const Codec& codec) { return codec.needs_training() ? codec.state_hash() : ""; }

  // The compressed file: codes, the tokens' positions and levels (the merged ones with --merge),
  // and the input's metadata with the codec's.
  void write_compressed(const Embeddings& in, const Codec& codec, const Coded& c) const {
    std::map<std::string, std::string> meta = in.metadata;
    meta["format"] = "fovea.compressed";
    meta["codec"] = codec.spec();
    meta["dim"] = std::to_string(in.embeddings.dim(1));
    meta["bytes_per_token"] = std::to_string(codec.bytes_per_token());
    meta["codebook_hash"] = codebook_hash(codec);
    meta["source"] = inputs[0];
    if (c.did_merge) {
      meta["merge_min_cosine"] = fmt("%g", merge);
      meta["merge_tokens_in"] = std::to_string(c.n_in);
    }
    std::vector<NamedTensor> tensors{{"codes", &c.codes}};
    if (c.did_merge) {
      tensors.push_back({"positions", &c.merged.positions});
      tensors.push_back({"levels", &c.merged.levels});
      tensors.push_back({"merge_parent", &c.merged.parent});
    } else {
      if (in.positions.rank() > 0) tensors.push_back({"positions", &in.positions});
      if (in.levels.rank() > 0) tensors.push_back({"levels", &in.levels});
    }
    save_safetensors(output, tensors, meta);
  }

  nlohmann::json compress_json(const Embeddings& in, const Codec& codec, const Coded& c, const std::string& trained_on) const {
    const int64_t dim = in.embeddings.dim(1), n = c.codes.dim(0);
    nlohmann::json j{{"input", inputs[0]},
                     {"output", output},
                     {"codec", codec.spec()},
                     {"dim", dim},
                     {"tokens", n},
                     {"bytes_per_token", codec.bytes_per_token()},
                     {"ratio_vs_fp32", double(4 * dim) / double(codec.bytes_per_token())},
                     {"ratio_vs_fp32_with_merge", double(4 * dim * c.n_in) / double(codec.bytes_per_token() * n)},
                     {"codebook", codebook},
                     {"codebook_hash", codebook_hash(codec)},
                     {"encode_ms", c.encode_ms}};
    if (!trained_on.empty()) j["trained_on"] = trained_on;
    if (c.did_merge) {
      nlohmann::json per_level = nlohmann::json::object();
      for (const auto& [lv, g] : c.merged.groups_per_level) per_level[std::to_string(lv)] = g;
      j["merge"] = {{"min_cosine", merge}, {"tokens_in", c.n_in}, {"tokens_out", n}, {"groups", c.merged.groups_merged},
                    {"groups_per_child_level", per_level}};
    }
    return j;
  }

  void print_compress(const Embeddings& in, const Codec& codec, const Coded& c, const std::string& trained_on) const {
    const int64_t dim = in.embeddings.dim(1), n = c.codes.dim(0);
    if (c.did_merge) {
      std::string lv;
      for (const auto& [l, g] : c.merged.groups_per_level)
        lv += (lv.empty() ? "" : ", ") + std::to_string(g) + " at level " + std::to_string(l);
      std::printf("merge: %lld -> %lld tokens (%lld groups of four siblings with cosine >= %g to their mean%s%s)\n",
                  (long long)c.n_in, (long long)n, (long long)c.merged.groups_merged, double(merge), lv.empty() ? "" : ": ",
                  lv.c_str());
    }
    if (!trained_on.empty())
      std::printf("trained %s on %s; codebook %s\n", codec.spec().c_str(), trained_on.c_str(), codebook.c_str());
    std::printf("%s: %lld tokens x D=%lld -> %lld bytes/token (%.1fx under fp32), %.2f ms\n", codec.spec().c_str(),
                (long long)n, (long long)dim, (long long)codec.bytes_per_token(),
                double(4 * dim) / double(codec.bytes_per_token()), c.encode_ms);
    std::printf("wrote %s\n", output.c_str());
  }

  static void check_codebook(const Codec& c, const std::map<std::string, std::string>& cb_meta, const Embeddings& in) {
    if (c.dim() != in.embeddings.dim(1))
      throw bad_file("the codebook is for D = " + std::to_string(c.dim()) + ", " + in.path + " has D = " +
                     std::to_string(in.embeddings.dim(1)));
    auto it = cb_meta.find("model");
    const std::string cb_model = it == cb_meta.end() ? "" : it->second;
    if (!cb_model.empty() && !in.model().empty() && cb_model != in.model())
      throw bad_file("the codebook was trained on model '" + cb_model + "', " + in.path + " comes from '" + in.model() + "'");
  }

  // The tokens --report measures on: every input, concatenated, and what the codecs train on.
  struct ReportInputs {
    std::vector<Embeddings> ins;
    int64_t n = 0, dim = 0;
    Tensor eval;        // [n, dim] f32
    TrainingSet t;      // --train, or in-sample: eval itself
    bool in_sample = true;
  };

  // What --report measured: a row per codec (and the merge's), and the codecs skipped.
  struct Report {
    std::vector<RateDistortionRow> rows;
    std::vector<std::string> skipped;
    bool merge_row = false;  // rows.back() is the merge's
  };

  int run_report() const {
    const ReportInputs in = load_report_inputs();
    const bool tty = isatty(STDERR_FILENO);
    Report rep;
    measure_codecs(in, tty, rep);
    measure_merge(in, rep);
    if (tty) std::fprintf(stderr, "\r%40s\r", "");
    nlohmann::json j = report_json(in, rep);
    if (!plot.empty()) {
      std::vector<compress::PlotPoint> pts;
      for (const RateDistortionRow& r : rep.rows)
        pts.push_back({r.codec, double(r.bytes_per_token), r.distortion.mean_cosine});
      const std::string title = std::to_string(in.n) + " tokens, D=" + std::to_string(in.dim) + ", " +
                                j["model"].get<std::string>() + (j["random_weights"].get<bool>() ? " (random weights)" : "");
      save_png(compress::plot_rate_distortion(pts, double(4 * in.dim), title), plot);
      j["plot"] = plot;
    }
    if (json) {
      std::cout << json_text(j) << '\n';
      return 0;
    }
    print_report(in, rep, j);
    return 0;
  }

  ReportInputs load_report_inputs() const {
    if (inputs.empty()) throw Error(Errc::invalid_argument, "--report needs at least one embeddings file");
    if (!output.empty()) throw Error(Errc::invalid_argument, "--report writes no compressed file; drop -o (use --json, --plot)");
    if (reps < 1 || reps > 100) throw Error(Errc::invalid_argument, "--reps must be in [1, 100]");
    ReportInputs r;
    for (const std::string& p : inputs) {
      r.ins.push_back(load_embeddings(p));
      if (r.ins.back().embeddings.dim(1) != r.ins.front().embeddings.dim(1))
        throw bad_file(p + " has D = " + std::to_string(r.ins.back().embeddings.dim(1)) + ", " + inputs[0] + " has D = " +
                       std::to_string(r.ins.front().embeddings.dim(1)));
      r.n += r.ins.back().embeddings.dim(0);
    }
    if (r.n == 0)  // (every ratio below is per token)
      throw bad_file(inputs.size() == 1 ? inputs[0] + " holds no tokens: nothing to measure"
                                        : "the inputs hold no tokens: nothing to measure");
    r.dim = r.ins.front().embeddings.dim(1);
    r.eval = Tensor(DType::f32, {r.n, r.dim});
    int64_t at = 0;
    for (const Embeddings& e : r.ins) {
      std::memcpy(r.eval.bytes() + at, e.embeddings.bytes(), e.embeddings.size_bytes());
      at += int64_t(e.embeddings.size_bytes());
    }
    r.in_sample = train.empty();
    if (r.in_sample) {
      r.t.x = r.eval.clone();
      r.t.model = r.ins.front().model();
      r.t.files = int64_t(r.ins.size());
    } else {
      r.t = load_training(train, r.dim);
    }
    return r;
  }

  // Each codec trained (when it learns) and measured; one without enough training vectors is
  // skipped, unless asked for by name.
  void measure_codecs(const ReportInputs& in, bool tty, Report& rep) const {
    const TrainingSet& t = in.t;
    std::vector<std::string> specs = codecs.empty() ? default_report_codecs(in.dim) : codecs;
    for (const std::string& spec : specs) make_codec(spec, in.dim);  // every spec checked before any training
    for (size_t i = 0; i < specs.size(); ++i) {
      if (tty) std::fprintf(stderr, "\r[%zu/%zu] %-16s", i + 1, specs.size(), specs[i].c_str());
      std::unique_ptr<Codec> c = make_codec(specs[i], in.dim);
      c->set_threads(threads);
      const auto t0 = Clock::now();
      if (c->needs_training()) {
        if (t.x.dim(0) < c->min_train_vectors()) {
          if (!codecs.empty()) c->train(t.x);  // asked for by name: the clear error
          rep.skipped.push_back(c->spec() + " (needs " + std::to_string(c->min_train_vectors()) +
                                " training vectors, have " + std::to_string(t.x.dim(0)) + ")");
          continue;
        }
        c->train(t.x);
      }
      const double train_ms = c->needs_training() ? ms_since(t0) : 0;
      RateDistortionRow r = measure_codec(*c, in.eval, reps);
      r.train_ms = train_ms;
      rep.rows.push_back(r);
    }
  }

  // The merge: per original token, its merged parent's embedding, stored as fp32. Only when every
  // input has positions and a quadtree to merge (uniform-grid tokens have none).
  void measure_merge(const ReportInputs& in, Report& rep) const {
    if (!std::all_of(in.ins.begin(), in.ins.end(), [](const Embeddings& e) { return e.positions.rank() > 0; })) return;
    const int64_t n = in.n, dim = in.dim;
    const float cos = merge >= -1 ? merge : MergeParams{}.min_cosine;
    Tensor back(DType::f32, {n, dim});
    int64_t out_tokens = 0, row = 0;
    for (const Embeddings& e : in.ins) {
      try {
        const MergeResult m = merge_siblings(e.embeddings, e.positions, {.min_cosine = cos});
        const Tensor u = unmerge(m);
        std::memcpy(back.bytes() + row * dim * 4, u.bytes(), u.size_bytes());
        row += u.dim(0);
        out_tokens += m.embeddings.dim(0);
      } catch (const Error&) {
        return;  // uniform-grid tokens: no quadtree to merge
      }
    }
    RateDistortionRow r;
    r.codec = "merge:" + fmt("%g", cos);
    r.tokens_in = n;
    r.tokens_out = out_tokens;
    r.bytes_per_token = (4 * dim * out_tokens + n - 1) / n;
    r.ratio_vs_fp32 = double(n) / double(out_tokens);
    r.distortion = measure_distortion(in.eval, back, threads);
    rep.rows.push_back(r);
    rep.merge_row = true;
  }

  nlohmann::json report_json(const ReportInputs& in, const Report& rep) const {
    nlohmann::json j;
    j["inputs"] = inputs;
    j["tokens"] = in.n;
    j["dim"] = in.dim;
    j["model"] = in.ins.front().model();
    auto rw = in.ins.front().metadata.find("random_weights");
    j["random_weights"] = rw != in.ins.front().metadata.end() && rw->second == "true";
    j["training"] = in.in_sample ? nlohmann::json("in-sample (the evaluated embeddings themselves)")
                                 : nlohmann::json({{"files", train}, {"vectors", in.t.x.dim(0)}});
    j["skipped"] = rep.skipped;
    nlohmann::json jr = nlohmann::json::array();
    for (const RateDistortionRow& r : rep.rows)
      jr.push_back({{"codec", r.codec},
                    {"bytes_per_token", r.bytes_per_token},
                    {"ratio_vs_fp32", r.ratio_vs_fp32},
                    {"mean_cosine", r.distortion.mean_cosine},
                    {"min_cosine", r.distortion.min_cosine},
                    {"relative_mse", r.distortion.relative_mse},
                    {"nn_agreement", r.distortion.nn_agreement},
                    {"train_ms", r.train_ms},
                    {"encode_gb_s", r.encode_gb_s},
                    {"decode_gb_s", r.decode_gb_s},
                    {"memcpy_gb_s", r.memcpy_gb_s},
                    {"tokens_in", r.tokens_in},
                    {"tokens_out", r.tokens_out}});
    j["rows"] = jr;
    return j;
  }

  void print_report(const ReportInputs& in, const Report& rep, const nlohmann::json& j) const {
    std::printf("rate-distortion: %lld tokens, D=%lld, model %s%s; training: %s\n", (long long)in.n, (long long)in.dim,
                j["model"].get<std::string>().c_str(), j["random_weights"].get<bool>() ? " (RANDOM weights)" : "",
                in.in_sample ? "in-sample (the evaluated embeddings)"
                             : (std::to_string(in.t.x.dim(0)) + " vectors from --train").c_str());
    std::printf("%-14s %8s %7s %8s %8s %9s %7s %9s %9s %9s\n", "codec", "B/token", "vs fp32", "cos mean", "cos min",
                "rel MSE", "NN agr", "enc GB/s", "dec GB/s", "train ms");
    std::printf("%-14s %8lld %6.1fx %8.4f %8.4f %9.2e %7.3f %9s %9s %9s\n", "fp32", (long long)(4 * in.dim), 1.0, 1.0, 1.0,
                0.0, 1.0, "-", "-", "-");
    for (const RateDistortionRow& r : rep.rows) {
      const bool m = r.tokens_out != r.tokens_in || r.codec.starts_with("merge");
      std::printf("%-14s %8lld %6.1fx %8.4f %8.4f %9.2e %7.3f %9s %9s %9s\n", r.codec.c_str(), (long long)r.bytes_per_token,
                  r.ratio_vs_fp32, r.distortion.mean_cosine, r.distortion.min_cosine, r.distortion.relative_mse,
                  r.distortion.nn_agreement, m ? "-" : fmt("%.2f", r.encode_gb_s).c_str(),
                  m ? "-" : fmt("%.2f", r.decode_gb_s).c_str(), m ? "-" : fmt("%.0f", r.train_ms).c_str());
    }
    if (!rep.rows.empty()) std::printf("memcpy of the same f32 bytes: %.2f GB/s (same run)\n", rep.rows.front().memcpy_gb_s);
    if (rep.merge_row)
      std::printf("merge row: tokens %lld -> %lld; B/token is fp32 bytes per original token\n",
                  (long long)rep.rows.back().tokens_in, (long long)rep.rows.back().tokens_out);
    for (const std::string& s : rep.skipped) std::printf("skipped %s\n", s.c_str());
    if (j["random_weights"].get<bool>())
      std::printf("note: random-weight embeddings; a trained ViT's features differ (outlier channels, other spectra)\n");
    if (!plot.empty()) std::printf("wrote %s\n", plot.c_str());
  }
};

Runner setup_compress(CLI::App& sub) {
  auto cmd = std::make_shared<CompressCommand>();
  sub.add_option("inputs", cmd->inputs, "Embeddings file(s) from 'fovea encode' (several with --report)")
      ->type_name("EMB.safetensors")
      ->required();
  std::string forms;
  for (const std::string& f : codec_spec_forms()) forms += (forms.empty() ? "" : "|") + f;
  sub.add_option("--codec,-c", cmd->codecs, "Codec: " + forms + " (--report: any number; default a standard set)")
      ->type_name("SPEC");
  sub.add_option("--train", cmd->train, "Embeddings files to train the codec on (int8, pca, pq, opq)")
      ->type_name("FILES...")
      ->expected(1, -1);
  sub.add_option("--codebook", cmd->codebook,
                 "With --train: where to save what the codec learned; without: the codebook to use")
      ->type_name("CB.safetensors");
  sub.add_option("--merge", cmd->merge,
                 "Merge four sibling tokens into their parent when each has at least this cosine to their mean")
      ->type_name("COS");
  sub.add_option("-o,--output", cmd->output, "Compressed file: codes, positions, levels, codebook hash")
      ->type_name("OUT.safetensors");
  sub.add_flag("--trust-faiss-codebook", cmd->trust_faiss,
               "Load a faiss:FACTORY --codebook (FAISS's serialised index, unsafe from an untrusted source)");
  sub.add_flag("--report", cmd->report, "Rate-distortion table of every codec on the inputs");
  sub.add_option("--plot", cmd->plot, "With --report: bytes per token against cosine, as a PNG")->type_name("PNG");
  sub.add_option("--reps", cmd->reps, "With --report: timing repetitions (best counts)")->default_val(3);
  sub.add_option("--threads", cmd->threads,
                 "OpenMP threads for FAISS (0: all cores). 1 by default: FAISS's short parallel regions crawl on "
                 "busy shared cores")
      ->default_val(1)
      ->check(CLI::Range(0, 1024));
  sub.add_flag("--json", cmd->json, "Print JSON");
  sub.footer(
      "Examples:\n"
      "  fovea compress emb.safetensors --codec fp16 -o emb.f16.safetensors\n"
      "  fovea compress emb.safetensors --codec opq:128 --train a.safetensors b.safetensors --codebook opq.safetensors -o c.safetensors\n"
      "  fovea compress emb.safetensors --codebook opq.safetensors -o c.safetensors\n"
      "  fovea compress --report a.safetensors b.safetensors --plot rd.png");
  return [cmd] { return cmd->run(); };
}

struct DecompressCommand {
  std::string input, codebook, output;
  bool json = false, trust_faiss = false;
  int threads = 1;

  int run() const {
    if (output.empty()) throw Error(Errc::invalid_argument, "decompress needs -o EMB.safetensors");
    const SafetensorsFile f = SafetensorsFile::open(input);
    std::map<std::string, std::string> meta = f.metadata();
    auto get = [&](const char* k) -> std::string {
      auto it = meta.find(k);
      if (it == meta.end()) throw bad_file(input + ": not a fovea compressed file (no '" + std::string(k) + "' in its metadata)");
      return it->second;
    };
    if (get("format") != "fovea.compressed")
      throw bad_file(input + ": not a fovea compressed file (format '" + get("format") + "')");
    const std::string spec = get("codec"), hash = get("codebook_hash");
    int64_t dim = 0;
    try {
      dim = std::stoll(get("dim"));
    } catch (const std::exception&) {
      throw bad_file(input + ": bad 'dim' in its metadata");
    }
    // The file names its codec: a faiss: one would run FAISS's index_factory on the file's string,
    // and its codebook is FAISS's serialised index (see load_codebook). Neither without consent.
    if (codec_uses_faiss_serialization(spec) && !trust_faiss)
      throw Error(Errc::unsupported, input + " was compressed with " + spec +
                                         ", whose codebook is FAISS's serialised index: FAISS reads it without checking "
                                         "it against damaged or crafted files; pass --trust-faiss-codebook if you made "
                                         "both files or trust their source");
    std::unique_ptr<Codec> codec;
    try {
      codec = make_codec(spec, dim);
    } catch (const Error& e) {
      throw bad_file(input + ": " + e.what());
    }
    codec->set_threads(threads);
    if (codec->needs_training()) {
      if (codebook.empty())
        throw Error(Errc::invalid_argument, input + " was compressed with " + spec + ": give its --codebook");
      std::map<std::string, std::string> cb_meta;
      codec = load_codebook(codebook, &cb_meta, {.trust_faiss = trust_faiss});
      codec->set_threads(threads);
      if (codec->spec() != spec || codec->dim() != dim)
        throw bad_file(codebook + " is a " + codec->spec() + " codebook for D = " + std::to_string(codec->dim()) + "; " + input +
                       " needs " + spec + " for D = " + std::to_string(dim));
      if (codec->state_hash() != hash)
        throw bad_file(codebook + " is not the codebook " + input + " was compressed with (hash " + codec->state_hash().substr(0, 16) +
                       "..., the file needs " + hash.substr(0, 16) + "...)");
    }
    const auto* ce = f.find("codes");
    if (!ce) throw bad_file(input + ": no 'codes' tensor");
    if (ce->dtype != DType::u8 || ce->shape.size() != 2 || ce->shape[1] != codec->bytes_per_token())
      throw bad_file(input + ": 'codes' must be U8 [N, " + std::to_string(codec->bytes_per_token()) + "] for " + spec);
    const Tensor codes = f.load(*ce);
    const int64_t n = codes.dim(0);
    const auto t0 = Clock::now();
    Tensor emb = codec->decode(codes);
    const double decode_ms = ms_since(t0);
    std::vector<Tensor> keep;
    keep.reserve(3);
    std::vector<NamedTensor> tensors{{"embeddings", &emb}};
    for (const char* name : {"positions", "levels", "merge_parent"})
      if (const auto* e = f.find(name)) {
        keep.push_back(f.load(*e));
        if (keep.back().rank() == 0 || (std::string(name) != "merge_parent" && keep.back().dim(0) != n))
          throw bad_file(input + ": '" + name + "' does not have one row per token");
        tensors.push_back({name, &keep.back()});
      }
    meta["format"] = "fovea.embeddings";
    meta["decompressed_from"] = input;
    meta["decompressed_codec"] = spec;
    meta.erase("codebook_hash");
    save_safetensors(output, tensors, meta);
    if (json) {
      std::cout << json_text({{"input", input}, {"output", output}, {"codec", spec}, {"tokens", n}, {"dim", dim},
                              {"decode_ms", decode_ms}})
                << '\n';
    } else {
      std::printf("%s: %lld tokens -> embeddings [%lld, %lld] f32, %.2f ms\nwrote %s\n", spec.c_str(), (long long)n,
                  (long long)n, (long long)dim, decode_ms, output.c_str());
    }
    return 0;
  }
};

Runner setup_decompress(CLI::App& sub) {
  auto cmd = std::make_shared<DecompressCommand>();
  sub.add_option("input", cmd->input, "Compressed file from 'fovea compress'")->type_name("OUT.safetensors")->required();
  sub.add_option("--codebook", cmd->codebook, "The codebook it was compressed with (int8, pca, pq, opq)")
      ->type_name("CB.safetensors");
  sub.add_option("-o,--output", cmd->output, "embeddings [N, D] f32 with positions and levels")->type_name("EMB.safetensors");
  sub.add_flag("--trust-faiss-codebook", cmd->trust_faiss,
               "Load a faiss:FACTORY file and codebook (FAISS's serialised index, unsafe from an untrusted source)");
  sub.add_option("--threads", cmd->threads, "OpenMP threads for FAISS (0: all cores)")->default_val(1)->check(CLI::Range(0, 1024));
  sub.add_flag("--json", cmd->json, "Print JSON");
  return [cmd] { return cmd->run(); };
}

Registration reg_compress{{"compress", "Compress token embeddings (fp16, int8, PCA, PQ/OPQ, sibling merge); --report", 40,
                           setup_compress}};
Registration reg_decompress{{"decompress", "Decode a compressed token file back to embeddings", 41, setup_decompress}};

}  // namespace
}  // namespace fovea::cli
