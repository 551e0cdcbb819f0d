// fovea store-bench [--backend all|host|vulkan|vulkan-image] [--dim D] [--dtype f16] [--page-bytes N]
//                   [--codecs LIST|none] [--json]
//
// The token store's scenario: an eight-image memory table (resident vs dense
// memory), pages bound per second one at a time vs batched vs merged on each backend, a frame's
// binds merged vs one page at a time (target: 10x), and gather bandwidth against memcpy. All
// backends run in the same process, so the ratios compare like with like. Page sizes are
// rounded up to each backend's sparse page (vulkan-image: 64 KiB blocks on lavapipe).
#include <algorithm>
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
    using nlohmann::json;
    StoreConfig cfg;
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
    const std::vector<std::string> specs = codec_specs();
    const bool with_codecs = specs.empty() || specs.front() != "none";
    std::string why;
    std::vector<std::string> backends;
    const std::vector<std::string> avail = available_store_backends(&why);
    if (backend == "all") {
      backends = avail;
    } else {
      backends = {backend};
      make_store_backend(backend);  // says clearly why it is not available
    }

    json out;
    out["config"] = {{"dim", dim}, {"dtype", dtype}, {"page_bytes", page_bytes}, {"reps", reps}};
    if (backend == "all" && !why.empty()) out["vulkan_unavailable"] = why;

    // 1. The memory table, on each backend (identical numbers expected), plus a page-size sweep.
    json tables = json::array();
    // Per backend: the page size rounded up to its sparse page.
    std::vector<StoreConfig> cfgs;
    std::vector<int64_t> bind_bytes;
    for (const std::string& b : backends) {
      const int64_t g = make_store_backend(b)->page_granularity_bytes();
      StoreConfig c = cfg;
      c.page_bytes = (cfg.page_bytes + g - 1) / g * g;
      cfgs.push_back(c);
      bind_bytes.push_back((bind_page_bytes + g - 1) / g * g);
    }
    std::vector<SeedTable> seed;
    for (size_t i = 0; i < backends.size(); ++i) seed.push_back(seed_table(backends[i], cfgs[i]));
    for (const SeedTable& t : seed) {
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
      if (!t.roundtrip_ok) throw Error(Errc::internal, "store-bench: " + t.backend + " gather did not return what was written");
    }
    out["seed_table"] = tables;
    json sweep = json::array();
    std::vector<SeedTable> sweep_tables;
    for (int64_t pb : {int64_t(4096), int64_t(16384), int64_t(65536), int64_t(262144)}) {
      StoreConfig c = cfg;
      c.page_bytes = pb;
      sweep_tables.push_back(seed_table("host", c));
      const SeedTable& t = sweep_tables.back();
      sweep.push_back({{"page_bytes", pb}, {"resident_bytes", t.stats.resident_bytes},
                       {"saved_fraction", t.saved_fraction()}, {"page_overhead", t.page_overhead()}});
    }
    out["page_size_sweep"] = sweep;

    // 2. Binds: backend level (N pages) and a whole frame through the store.
    std::vector<BindTiming> raw, frame;
    for (size_t i = 0; i < backends.size(); ++i)
      for (BindMode m : {BindMode::single, BindMode::batched, BindMode::merged}) {
        raw.push_back(time_backend_binds(backends[i], m, bind_pages, bind_bytes[i], reps));
        frame.push_back(time_frame_binds(backends[i], m, cfgs[i], reps));
      }
    auto timings_json = [](const std::vector<BindTiming>& v) {
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
    };
    out["backend_binds"] = timings_json(raw);
    out["frame_binds"] = timings_json(frame);
    // The target: a frame's binds (merged, one submission) at least 10x faster than
    // binding its pages one at a time with a fence each.
    constexpr double kTargetSpeedup = 10.0;
    json speedups = json::array();
    for (size_t i = 0; i + 2 < frame.size(); i += 3) {
      const double r = frame[i + 2].bind_ms > 0 ? frame[i].bind_ms / frame[i + 2].bind_ms : 0.0;
      speedups.push_back({{"backend", frame[i].backend}, {"pages", frame[i].pages}, {"single_ms", frame[i].bind_ms},
                          {"merged_ms", frame[i + 2].bind_ms}, {"merged_vs_single", r},
                          {"target", kTargetSpeedup}, {"target_met", r >= kTargetSpeedup}});
    }
    out["frame_speedup"] = speedups;

    // 3. Gather bandwidth vs memcpy.
    std::vector<GatherTiming> gathers;
    json gj = json::array();
    for (size_t i = 0; i < backends.size(); ++i) {
      gathers.push_back(time_gather(backends[i], cfgs[i], reps));
      const GatherTiming& g = gathers.back();
      gj.push_back({{"backend", g.backend}, {"bytes", g.bytes}, {"ranges", g.ranges}, {"gather_ms", g.gather_ms},
                    {"memcpy_ms", g.memcpy_ms}, {"gather_gb_s", g.gather_gb_s()}, {"memcpy_gb_s", g.memcpy_gb_s()},
                    {"gather_vs_memcpy", g.memcpy_ms > 0 ? g.gather_ms / g.memcpy_ms : 0.0}});
    }
    out["gather"] = gj;

    // 4. The memory table with compressed pages: resident MB against dense fp32.
    std::vector<std::vector<CompressedSeedRow>> compressed;
    json cj = json::array();
    const std::vector<SeedCodec> seed_codecs = with_codecs ? train_seed_codecs(cfg.dim, specs) : std::vector<SeedCodec>{};
    for (size_t i = 0; i < backends.size() && with_codecs; ++i) {
      compressed.push_back(compressed_seed_table(backends[i], cfgs[i], seed_codecs, reps));
      for (const CompressedSeedRow& r : compressed.back()) {
        if (!r.roundtrip_ok)
          throw Error(Errc::internal, "store-bench: " + backends[i] + " gather_decoded of " + r.codec + " pages was wrong");
        cj.push_back({{"backend", backends[i]}, {"codec", r.codec}, {"record_bytes", r.record_bytes}, {"pages", r.pages},
                      {"resident_bytes", r.resident_bytes}, {"dense_fp32_bytes", r.dense_fp32_bytes},
                      {"resident_vs_dense_fp32", r.resident_vs_dense_fp32()}, {"decoded_on_device", r.on_device},
                      {"gather_decoded_ms", r.gather_decoded_ms}, {"roundtrip_ok", r.roundtrip_ok}});
      }
    }
    out["compressed_seed_table"] = cj;

    if (as_json) {
      std::cout << json_text(out) << '\n';
      return 0;
    }
    const SeedTable& t0 = seed.front();
    std::printf("fovea store-bench: D=%lld %s (%lld bytes a token), %lld KiB pages, median of %d runs\n",
                (long long)dim, dtype.c_str(), (long long)t0.token_bytes, (long long)(page_bytes >> 10), reps);
    if (out.contains("vulkan_unavailable"))
      std::printf("  %s backend: not available (%s); the host backend serves\n",
                  avail.size() < 2 ? "vulkan" : "vulkan-image", why.c_str());
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
    for (const SeedTable& t : seed)
      std::printf("  %s backend: %lld pages of %lld KiB resident (%.1f%% saved), gather round trip %s\n",
                  t.backend.c_str(), (long long)t.stats.resident_pages, (long long)(t.page_bytes >> 10),
                  100.0 * t.saved_fraction(), t.roundtrip_ok ? "ok" : "FAILED");
    std::printf("  page size sweep (host):");
    for (const SeedTable& t : sweep_tables)
      std::printf("  %lld KiB: %.1f%% saved, +%.1f%%", (long long)(t.page_bytes >> 10), 100.0 * t.saved_fraction(),
                  100.0 * t.page_overhead());
    std::printf("\n");

    auto print_binds = [](const std::vector<BindTiming>& v, bool frame) {
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
    };
    std::printf("\nBinding %lld pages at the backend (virtual i -> physical i), then unbinding; pages of %lld KiB\n"
                "(vulkan-image: its 64 KiB blocks, one entry per block):\n",
                (long long)bind_pages, (long long)(bind_page_bytes >> 10));
    print_binds(raw, false);
    std::printf("\nA frame through the store: the table's %lld pages in one bind_batch. bind ms: the backend's bind\n"
                "submissions; fill ms: zeroing the new pages; batch ms: the whole bind_batch:\n",
                (long long)frame.front().pages);
    print_binds(frame, true);
    std::printf("\nA frame's binds, merged vs one page at a time (target: at least %.0fx faster):\n", kTargetSpeedup);
    for (const auto& sp : speedups)
      std::printf("  %-12s %4lld pages: %9.3f ms single, %8.3f ms merged: %7.1fx  %s\n",
                  sp["backend"].get<std::string>().c_str(), (long long)sp["pages"].get<int64_t>(),
                  sp["single_ms"].get<double>(), sp["merged_ms"].get<double>(), sp["merged_vs_single"].get<double>(),
                  sp["target_met"].get<bool>() ? "target met" : "target NOT met");

    std::printf("\nGather of every kept token (%lld ranges, %.2f MiB) into one batch vs memcpy of as many bytes:\n",
                (long long)gathers.front().ranges, gathers.front().bytes / 1048576.0);
    std::printf("  %-12s %10s %8s %10s %8s %14s\n", "backend", "gather ms", "GB/s", "memcpy ms", "GB/s", "gather/memcpy");
    for (const GatherTiming& g : gathers)
      std::printf("  %-12s %10.3f %8.2f %10.3f %8.2f %13.2fx\n", g.backend.c_str(), g.gather_ms, g.gather_gb_s(),
                  g.memcpy_ms, g.memcpy_gb_s(), g.memcpy_ms > 0 ? g.gather_ms / g.memcpy_ms : 0.0);

    if (!with_codecs) return 0;
    std::printf("\nMemory table with compressed pages (D=%lld, %lld KiB pages): the kept tokens stored as each\n"
                "codec's records; gather_decoded returns [4300, D] f32 (on the device when the backend can):\n",
                (long long)dim, (long long)(page_bytes >> 10));
    std::printf("  %-12s %-8s %8s %6s %12s %16s %9s %16s\n", "backend", "codec", "B/token", "pages", "resident MB",
                "vs dense fp32", "decode", "gather+decode ms");
    for (size_t i = 0; i < backends.size(); ++i)
      for (const CompressedSeedRow& r : compressed[i])
        std::printf("  %-12s %-8s %8lld %6lld %12.2f %15.1f%% %9s %16.3f\n", backends[i].c_str(), r.codec.c_str(),
                    (long long)r.record_bytes, (long long)r.pages, r.resident_bytes / 1e6, 100.0 * r.resident_vs_dense_fp32(),
                    r.codec == "fp32" ? "-" : (r.on_device ? "device" : "cpu"), r.gather_decoded_ms);
    std::printf("  dense fp32: 8 x %lld tokens x %lld bytes = %.2f MB\n", (long long)kSeedDenseTokens, (long long)(4 * dim),
                compressed.front().front().dense_fp32_bytes / 1e6);
    return 0;
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
