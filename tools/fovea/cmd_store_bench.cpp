// fovea store-bench [--backend all|host|vulkan|vulkan-image] [--dim D] [--dtype f16] [--page-bytes N]
//                   [--codecs LIST|none] [--json]
//
// The token store's scenario: an eight-image memory table (resident vs dense
// memory), pages bound per second one at a time vs batched vs merged on each backend, a frame's
// binds merged vs one page at a time (target: 10x), and gather bandwidth against memcpy. All
// backends run in the same process, so the ratios compare like with like. Page sizes are
// rounded up to each backend's sparse page (vulkan-image: 64 KiB blocks on lavapipe).
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli_util.hpp"
#include "command.hpp"
#include "fovea/compress.hpp"
#include "fovea/error.hpp"
#include "store_bench.hpp"
#include <nlohmann/json.hpp>

namespace fovea::cli {
namespace {

using nlohmann::json;

// A frame's binds (merged, one submission) should be at least this much faster than binding its
// pages one at a time with a fence each.
constexpr double kTargetSpeedup = 10.0;
// The host page sizes of the memory table's page-size sweep.
constexpr std::array<int64_t, 4> kSweepPageBytes = {4096, 16384, 65536, 262144};

// What one store-bench run measured, filled phase by phase: the memory tables, the binds, the
// gathers and the compressed tables, then reported as JSON or as text.
struct StoreBenchRun {
  StoreConfig cfg;                    // the options' store configuration
  std::vector<std::string> backends;  // the backends measured, in order
  std::vector<std::string> avail;     // the backends this machine has
  std::string why;                    // why vulkan is not available ("" when it is)
  // Per backend: the page size rounded up to its sparse page, and the bind benchmark's page size.
  std::vector<StoreConfig> cfgs;
  std::vector<int64_t> bind_bytes;
  std::vector<SeedTable> seed;          // per backend
  std::vector<SeedTable> sweep_tables;  // host, per kSweepPageBytes
  std::vector<BindTiming> raw, frame;   // per backend: single, batched, merged
  std::vector<GatherTiming> gathers;    // per backend
  std::vector<std::string> specs;       // the --codecs list (empty: the default set)
  bool with_codecs = true;
  std::vector<std::vector<CompressedSeedRow>> compressed;  // per backend, with_codecs only
};

// The rows of a timings list (per backend: single, batched, merged), each with its speed-up over
// its backend's single.
json timings_json(const std::vector<BindTiming>& v) {
  json a = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const BindTiming& single = v[i - i % 3];
    a.push_back({{"backend", v[i].backend}, {"mode", to_string(v[i].mode)}, {"pages", v[i].pages},
                 {"page_bytes", v[i].page_bytes}, {"calls", v[i].calls}, {"entries", v[i].entries},
                 {"bind_ms", v[i].bind_ms}, {"unbind_ms", v[i].unbind_ms}, {"pages_per_s", v[i].pages_per_s()},
                 {"fill_ms", v[i].fill_ms}, {"batch_ms", v[i].batch_ms},
                 {"speedup_vs_single", v[i].bind_ms > 0 ? single.bind_ms / v[i].bind_ms : 0.0}});
  }
  return a;
}

// A frame's binds merged vs one page at a time, per backend, against kTargetSpeedup.
json frame_speedups_json(const std::vector<BindTiming>& frame) {
  json speedups = json::array();
  for (size_t i = 0; i + 2 < frame.size(); i += 3) {
    const double r = frame[i + 2].bind_ms > 0 ? frame[i].bind_ms / frame[i + 2].bind_ms : 0.0;
    speedups.push_back({{"backend", frame[i].backend}, {"pages", frame[i].pages}, {"single_ms", frame[i].bind_ms},
                        {"merged_ms", frame[i + 2].bind_ms}, {"merged_vs_single", r},
                        {"target", kTargetSpeedup}, {"target_met", r >= kTargetSpeedup}});
  }
  return speedups;
}

void print_binds(const std::vector<BindTiming>& v, bool frame) {
  std::printf("  %-12s %-8s %6s %8s %10s %12s %10s %10s", "backend", "mode", "calls", "entries", "bind ms",
              "pages/s", "unbind ms", "vs single");
  std::printf(frame ? " %9s %10s\n" : "\n", "fill ms", "batch ms");
  for (size_t i = 0; i < v.size(); ++i) {
    const BindTiming& single = v[i - i % 3];
    std::printf("  %-12s %-8s %6lld %8lld %10.3f %12.0f %10.3f %9.1fx", v[i].backend.c_str(),
                std::string(to_string(v[i].mode)).c_str(), (long long)v[i].calls, (long long)v[i].entries,
                v[i].bind_ms, v[i].pages_per_s(), v[i].unbind_ms,
                v[i].bind_ms > 0 ? single.bind_ms / v[i].bind_ms : 0.0);
    if (frame) std::printf(" %9.3f %10.3f", v[i].fill_ms, v[i].batch_ms);
    std::printf("\n");
  }
}

struct StoreBenchCommand {
  std::string backend = "all";
  int64_t dim = 1024;
  std::string dtype = "f16";
  int64_t page_bytes = 64 << 10;
  int64_t bind_pages = 1000;
  int64_t bind_page_bytes = 4096;
  int reps = 7;
  std::string codecs;  // empty: the default set (train_seed_codecs); "none": no compressed table
  bool as_json = false;

  std::vector<std::string> codec_specs() const {
    std::vector<std::string> v;
    if (codecs.empty()) return v;
    if (codecs == "none") return {"none"};
    size_t at = 0;
    while (at <= codecs.size()) {
      const size_t comma = std::min(codecs.find(',', at), codecs.size());
      const std::string spec = codecs.substr(at, comma - at);
      if (spec.empty() || spec == "none")
        throw Error(Errc::invalid_argument, "--codecs '" + codecs + "': expected none or a comma-separated list of fp32, fp16, int8, pq:M");
      if (spec != "fp32") make_codec(spec, dim);  // an unknown or unfitting codec fails here, before any work
      v.push_back(spec);
      at = comma + 1;
    }
    return v;
  }

  int run() const {
    StoreBenchRun r = prepare();
    measure_tables(r);
    measure_binds_and_gathers(r);
    measure_compressed(r);
    const json out = to_json(r);
    if (as_json) {
      std::cout << json_text(out) << '\n';
      return 0;
    }
    print_text(r, out);
    return 0;
  }

  // Checks the options, picks the backends and rounds the page sizes to each one's sparse page.
  StoreBenchRun prepare() const {
    StoreBenchRun r;
    StoreConfig& cfg = r.cfg;
    cfg.dim = dim;
    if (dtype == "f32") cfg.dtype = DType::f32;
    else if (dtype == "f16") cfg.dtype = DType::f16;
    else if (dtype == "bf16") cfg.dtype = DType::bf16;
    else throw Error(Errc::invalid_argument, "--dtype must be f32, f16 or bf16");
    cfg.page_bytes = page_bytes;
    if (reps < 1 || reps > 1000) throw Error(Errc::invalid_argument, "--reps must be in [1, 1000]");
    if (page_bytes % 4096 != 0 || bind_page_bytes % 4096 != 0)
      throw Error(Errc::invalid_argument, "--page-bytes and --bind-page-bytes must each be a multiple of 4096 (they are "
                                          "rounded up to each backend's sparse page), got " +
                                              std::to_string(page_bytes) + " and " + std::to_string(bind_page_bytes));
    if (bind_pages < 1 || bind_pages > (1 << 20)) throw Error(Errc::invalid_argument, "--bind-pages must be in [1, 1048576]");
    r.specs = codec_specs();
    r.with_codecs = r.specs.empty() || r.specs.front() != "none";
    r.avail = available_store_backends(&r.why);
    if (backend == "all") {
      r.backends = r.avail;
    } else {
      r.backends = {backend};
      make_store_backend(backend);  // says clearly why it is not available
    }
    for (const std::string& b : r.backends) {
      const int64_t g = make_store_backend(b)->page_granularity_bytes();
      StoreConfig c = cfg;
      c.page_bytes = (cfg.page_bytes + g - 1) / g * g;
      r.cfgs.push_back(c);
      r.bind_bytes.push_back((bind_page_bytes + g - 1) / g * g);
    }
    return r;
  }

  // 1. The memory table, on each backend (identical numbers expected), plus a page-size sweep.
  void measure_tables(StoreBenchRun& r) const {
    for (size_t i = 0; i < r.backends.size(); ++i) r.seed.push_back(seed_table(r.backends[i], r.cfgs[i]));
    for (const SeedTable& t : r.seed)
      if (!t.roundtrip_ok) throw Error(Errc::internal, "store-bench: " + t.backend + " gather did not return what was written");
    for (int64_t pb : kSweepPageBytes) {
      StoreConfig c = r.cfg;
      c.page_bytes = pb;
      r.sweep_tables.push_back(seed_table("host", c));
    }
  }

  // 2. Binds: backend level (N pages) and a whole frame through the store. 3. Gather bandwidth vs memcpy.
  void measure_binds_and_gathers(StoreBenchRun& r) const {
    for (size_t i = 0; i < r.backends.size(); ++i)
      for (BindMode m : {BindMode::single, BindMode::batched, BindMode::merged}) {
        r.raw.push_back(time_backend_binds(r.backends[i], m, bind_pages, r.bind_bytes[i], reps));
        r.frame.push_back(time_frame_binds(r.backends[i], m, r.cfgs[i], reps));
      }
    for (size_t i = 0; i < r.backends.size(); ++i) r.gathers.push_back(time_gather(r.backends[i], r.cfgs[i], reps));
  }

  // 4. The memory table with compressed pages: resident MB against dense fp32.
  void measure_compressed(StoreBenchRun& r) const {
    if (!r.with_codecs) return;
    const std::vector<SeedCodec> seed_codecs = train_seed_codecs(r.cfg.dim, r.specs);
    for (size_t i = 0; i < r.backends.size(); ++i) {
      r.compressed.push_back(compressed_seed_table(r.backends[i], r.cfgs[i], seed_codecs, reps));
      for (const CompressedSeedRow& row : r.compressed.back())
        if (!row.roundtrip_ok)
          throw Error(Errc::internal, "store-bench: " + r.backends[i] + " gather_decoded of " + row.codec + " pages was wrong");
    }
  }

  json to_json(const StoreBenchRun& r) const {
    json out;
    out["config"] = {{"dim", dim}, {"dtype", dtype}, {"page_bytes", page_bytes}, {"reps", reps}};
    if (backend == "all" && !r.why.empty()) out["vulkan_unavailable"] = r.why;
    json tables = json::array();
    for (const SeedTable& t : r.seed) {
      json imgs = json::array();
      for (const SeedImage& im : t.images)
        imgs.push_back({{"dense_tokens", im.dense_tokens}, {"kept_tokens", im.kept_tokens}, {"pages", im.pages},
                        {"resident_bytes", im.resident_bytes}, {"payload_bytes", im.payload_bytes},
                        {"dense_bytes", im.dense_bytes}});
      tables.push_back({{"backend", t.backend},
                        {"token_bytes", t.token_bytes},
                        {"page_bytes", t.page_bytes},
                        {"images", imgs},
                        {"resident_pages", t.stats.resident_pages},
                        {"resident_bytes", t.stats.resident_bytes},
                        {"payload_bytes", t.stats.payload_bytes},
                        {"dense_bytes", t.stats.dense_bytes},
                        {"saved_fraction", t.saved_fraction()},
                        {"payload_saved_fraction", t.payload_saved_fraction()},
                        {"page_overhead", t.page_overhead()},
                        {"roundtrip_ok", t.roundtrip_ok}});
    }
    out["seed_table"] = tables;
    json sweep = json::array();
    for (size_t i = 0; i < r.sweep_tables.size(); ++i) {
      const SeedTable& t = r.sweep_tables[i];
      sweep.push_back({{"page_bytes", kSweepPageBytes[i]}, {"resident_bytes", t.stats.resident_bytes},
                       {"saved_fraction", t.saved_fraction()}, {"page_overhead", t.page_overhead()}});
    }
    out["page_size_sweep"] = sweep;
    out["backend_binds"] = timings_json(r.raw);
    out["frame_binds"] = timings_json(r.frame);
    out["frame_speedup"] = frame_speedups_json(r.frame);
    json gj = json::array();
    for (const GatherTiming& g : r.gathers)
      gj.push_back({{"backend", g.backend}, {"bytes", g.bytes}, {"ranges", g.ranges}, {"gather_ms", g.gather_ms},
                    {"memcpy_ms", g.memcpy_ms}, {"gather_gb_s", g.gather_gb_s()}, {"memcpy_gb_s", g.memcpy_gb_s()},
                    {"gather_vs_memcpy", g.memcpy_ms > 0 ? g.gather_ms / g.memcpy_ms : 0.0}});
    out["gather"] = gj;
    json cj = json::array();
    for (size_t i = 0; i < r.compressed.size(); ++i)
      for (const CompressedSeedRow& row : r.compressed[i])
        cj.push_back({{"backend", r.backends[i]}, {"codec", row.codec}, {"record_bytes", row.record_bytes}, {"pages", row.pages},
                      {"resident_bytes", row.resident_bytes}, {"dense_fp32_bytes", row.dense_fp32_bytes},
                      {"resident_vs_dense_fp32", row.resident_vs_dense_fp32()}, {"decoded_on_device", row.on_device},
                      {"gather_decoded_ms", row.gather_decoded_ms}, {"roundtrip_ok", row.roundtrip_ok}});
    out["compressed_seed_table"] = cj;
    return out;
  }

  void print_text(const StoreBenchRun& r, const json& out) const {
    print_memory_table(r, out);
    std::printf("\nBinding %lld pages at the backend (virtual i -> physical i), then unbinding; pages of %lld KiB\n"
                "(vulkan-image: its 64 KiB blocks, one entry per block):\n",
                (long long)bind_pages, (long long)(bind_page_bytes >> 10));
    print_binds(r.raw, false);
    std::printf("\nA frame through the store: the table's %lld pages in one bind_batch. bind ms: the backend's bind\n"
                "submissions; fill ms: zeroing the new pages; batch ms: the whole bind_batch:\n",
                (long long)r.frame.front().pages);
    print_binds(r.frame, true);
    std::printf("\nA frame's binds, merged vs one page at a time (target: at least %.0fx faster):\n", kTargetSpeedup);
    for (const auto& sp : out["frame_speedup"])
      std::printf("  %-12s %4lld pages: %9.3f ms single, %8.3f ms merged: %7.1fx  %s\n",
                  sp["backend"].get<std::string>().c_str(), (long long)sp["pages"].get<int64_t>(),
                  sp["single_ms"].get<double>(), sp["merged_ms"].get<double>(), sp["merged_vs_single"].get<double>(),
                  sp["target_met"].get<bool>() ? "target met" : "target NOT met");

    std::printf("\nGather of every kept token (%lld ranges, %.2f MiB) into one batch vs memcpy of as many bytes:\n",
                (long long)r.gathers.front().ranges, r.gathers.front().bytes / 1048576.0);
    std::printf("  %-12s %10s %8s %10s %8s %14s\n", "backend", "gather ms", "GB/s", "memcpy ms", "GB/s", "gather/memcpy");
    for (const GatherTiming& g : r.gathers)
      std::printf("  %-12s %10.3f %8.2f %10.3f %8.2f %13.2fx\n", g.backend.c_str(), g.gather_ms, g.gather_gb_s(),
                  g.memcpy_ms, g.memcpy_gb_s(), g.memcpy_ms > 0 ? g.gather_ms / g.memcpy_ms : 0.0);
    if (r.with_codecs) print_compressed(r);
  }

  void print_memory_table(const StoreBenchRun& r, const json& out) const {
    const SeedTable& t0 = r.seed.front();
    std::printf("fovea store-bench: D=%lld %s (%lld bytes a token), %lld KiB pages, median of %d runs\n",
                (long long)dim, dtype.c_str(), (long long)t0.token_bytes, (long long)(page_bytes >> 10), reps);
    if (out.contains("vulkan_unavailable"))
      std::printf("  %s backend: not available (%s); the host backend serves\n",
                  r.avail.size() < 2 ? "vulkan" : "vulkan-image", r.why.c_str());
    std::printf("\nMemory table: 8 images of %lld dense tokens, kept tokens bound at [0, kept)\n",
                (long long)kSeedDenseTokens);
    std::printf("  %-6s %6s %6s %13s %12s %10s\n", "image", "kept", "pages", "resident KiB", "payload KiB", "dense KiB");
    for (size_t i = 0; i < t0.images.size(); ++i) {
      const SeedImage& im = t0.images[i];
      std::printf("  %-6zu %6lld %6lld %13.1f %12.1f %10.1f\n", i + 1, (long long)im.kept_tokens, (long long)im.pages,
                  im.resident_bytes / 1024.0, im.payload_bytes / 1024.0, im.dense_bytes / 1024.0);
    }
    std::printf("  %-6s %6lld %6lld %13.1f %12.1f %10.1f\n", "total", (long long)t0.stats.resident_tokens,
                (long long)t0.stats.resident_pages, t0.stats.resident_bytes / 1024.0, t0.stats.payload_bytes / 1024.0,
                t0.stats.dense_bytes / 1024.0);
    std::printf("  resident vs dense: %.1f%% of the dense memory, %.1f%% saved (the design documents claim 46%%)\n",
                100.0 * (1.0 - t0.saved_fraction()), 100.0 * t0.saved_fraction());
    std::printf("  perfect packing would save %.1f%%; whole pages cost %.1f%% over the payload (each image's\n"
                "  last page is partly empty: %lld tokens a page, so up to %lld tokens of slack per image)\n",
                100.0 * t0.payload_saved_fraction(), 100.0 * t0.page_overhead(),
                (long long)(t0.page_bytes / t0.token_bytes), (long long)(t0.page_bytes / t0.token_bytes - 1));
    for (const SeedTable& t : r.seed)
      std::printf("  %s backend: %lld pages of %lld KiB resident (%.1f%% saved), gather round trip %s\n",
                  t.backend.c_str(), (long long)t.stats.resident_pages, (long long)(t.page_bytes >> 10),
                  100.0 * t.saved_fraction(), t.roundtrip_ok ? "ok" : "FAILED");
    std::printf("  page size sweep (host):");
    for (const SeedTable& t : r.sweep_tables)
      std::printf("  %lld KiB: %.1f%% saved, +%.1f%%", (long long)(t.page_bytes >> 10), 100.0 * t.saved_fraction(),
                  100.0 * t.page_overhead());
    std::printf("\n");
  }

  void print_compressed(const StoreBenchRun& r) const {
    std::printf("\nMemory table with compressed pages (D=%lld, %lld KiB pages): the kept tokens stored as each\n"
                "codec's records; gather_decoded returns [4300, D] f32 (on the device when the backend can):\n",
                (long long)dim, (long long)(page_bytes >> 10));
    std::printf("  %-12s %-8s %8s %6s %12s %16s %9s %16s\n", "backend", "codec", "B/token", "pages", "resident MB",
                "vs dense fp32", "decode", "gather+decode ms");
    for (size_t i = 0; i < r.backends.size(); ++i)
      for (const CompressedSeedRow& row : r.compressed[i])
        std::printf("  %-12s %-8s %8lld %6lld %12.2f %15.1f%% %9s %16.3f\n", r.backends[i].c_str(), row.codec.c_str(),
                    (long long)row.record_bytes, (long long)row.pages, row.resident_bytes / 1e6, 100.0 * row.resident_vs_dense_fp32(),
                    row.codec == "fp32" ? "-" : (row.on_device ? "device" : "cpu"), row.gather_decoded_ms);
    std::printf("  dense fp32: 8 x %lld tokens x %lld bytes = %.2f MB\n", (long long)kSeedDenseTokens, (long long)(4 * dim),
                r.compressed.front().front().dense_fp32_bytes / 1e6);
  }
};

Runner setup_store_bench(CLI::App& sub) {
  auto cmd = std::make_shared<StoreBenchCommand>();
  sub.add_option("--backend", cmd->backend,
                 "Store backend: all (host, plus vulkan and vulkan-image when the device can), host, vulkan or "
                 "vulkan-image")
      ->check(CLI::IsMember({"all", "host", "vulkan", "vulkan-image"}))
      ->default_val("all");
  sub.add_option("--dim", cmd->dim, "Embedding width D of a token")->check(CLI::Range(1, 1 << 20))->default_val(1024);
  sub.add_option("--dtype", cmd->dtype, "Embedding dtype: f32, f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->default_val("f16");
  sub.add_option("--page-bytes", cmd->page_bytes, "Store page size (a multiple of the backend's sparse page size)")
      ->check(CLI::Range(int64_t(4096), int64_t(1) << 30))
      ->default_val(64 << 10);
  sub.add_option("--bind-pages", cmd->bind_pages, "Pages in the backend-level bind benchmark")
      ->check(CLI::Range(1, 1 << 20))
      ->default_val(1000);
  sub.add_option("--bind-page-bytes", cmd->bind_page_bytes, "Page size in the backend-level bind benchmark")
      ->check(CLI::Range(int64_t(4096), int64_t(1) << 30))
      ->default_val(4096);
  sub.add_option("--reps", cmd->reps, "Repetitions per timing (the median is reported)")
      ->check(CLI::Range(1, 1000))
      ->default_val(7);
  sub.add_option("--codecs", cmd->codecs,
                 "Codecs of the compressed seed table, comma-separated (fp32, fp16, int8, pq:M), or none; default "
                 "fp32,fp16,int8,pq:D/8,pq:D/16 (PQ training takes most of the time)");
  sub.add_flag("--json", cmd->as_json, "Print the results as JSON");
  sub.footer(
      "Examples:\n"
      "  fovea store-bench\n"
      "  fovea store-bench --backend vulkan --bind-pages 4000 --json\n"
      "  fovea store-bench --dim 1152 --dtype bf16 --page-bytes 16384\n"
      "  fovea store-bench --backend host --codecs int8,pq:64");
  return [cmd] { return cmd->run(); };
}

Registration reg_store_bench{{"store-bench", "Measure the paged token store: an eight-image memory table, bind modes, gather", 60,
                  setup_store_bench}};

}  // namespace
}  // namespace fovea::cli
