// The token store through the CLI: fovea store-bench and tokenize --store, on the host and, in
// Vulkan builds, on the sparse backends (with the host serving when no device can).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "fovea/image.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/token_cache.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

std::string blake2b_hex(std::span<const std::byte> bytes) {
  Blake2b h(32);
  h.update(bytes.data(), bytes.size());
  uint8_t d[32];
  h.final(d);
  std::string out;
  char hex[3];
  for (uint8_t b : d) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    out += hex;
  }
  return out;
}

// The bind structure of store-bench's modes, which is what makes merged binds fast: single
// submits one backend call per page, batched one call with an entry per page, merged one call
// with neighbouring pages merged. The seed table's 8 images each get contiguous virtual and
// physical pages, so a frame merges to at most one entry per image. (The speed-up itself is a
// timing: bench material, reported by store-bench, not asserted here.)
void expect_bind_structure(const nlohmann::json& j) {
  for (const char* table : {"backend_binds", "frame_binds"}) {
    ASSERT_FALSE(j[table].empty()) << table;
    for (const auto& b : j[table]) {
      const int64_t pages = b["pages"], calls = b["calls"], entries = b["entries"];
      const std::string mode = b["mode"];
      ASSERT_GT(pages, 1) << b;
      if (mode == "single") {
        EXPECT_EQ(calls, pages) << b;
        EXPECT_EQ(entries, pages) << b;
      } else if (mode == "batched") {
        EXPECT_EQ(calls, 1) << b;
        EXPECT_EQ(entries, pages) << b;
      } else {
        EXPECT_EQ(mode, "merged");
        EXPECT_EQ(calls, 1) << b;
        // backend_binds maps virtual page i to physical page i: one run.
        EXPECT_EQ(entries, std::string(table) == "backend_binds" ? 1 : 8) << b;
      }
    }
  }
}

TEST(StoreCli, StoreBenchAndTokenizeStore) {
  // (The compressed table's PQ training is the slow part: every backend's run below trains it.)
  const auto r = test::run_cli(
      {"store-bench", "--backend", "host", "--reps", "1", "--bind-pages", "64", "--codecs", "fp16,int8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["seed_table"][0]["resident_pages"].get<int64_t>(), 138);
  EXPECT_EQ(j["backend_binds"].size(), 3u);
  expect_bind_structure(j);
  ASSERT_EQ(j["compressed_seed_table"].size(), 2u) << r.out;
  EXPECT_EQ(j["compressed_seed_table"][0]["codec"], "fp16");
  EXPECT_EQ(j["compressed_seed_table"][1]["codec"], "int8");
  EXPECT_EQ(j["compressed_seed_table"][1]["record_bytes"].get<int64_t>(), 1024);  // one byte a value at D = 1024
  const auto text = test::run_cli({"store-bench", "--backend", "host", "--reps", "1", "--bind-pages", "16", "--codecs", "none"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("46.1% saved"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("compressed pages"), std::string::npos) << text.out;
  for (const char* bad : {"pq:7", "zstd", "int8,,fp16", "none,int8"}) {
    const auto b = test::run_cli({"store-bench", "--backend", "host", "--codecs", bad});
    EXPECT_EQ(b.exit_code, 2) << bad;
    EXPECT_NE(b.err.find("fovea: error:"), std::string::npos) << bad << ": " << b.err;
  }
  const auto badpage = test::run_cli({"store-bench", "--page-bytes", "5000"});
  EXPECT_EQ(badpage.exit_code, 2);
  EXPECT_NE(badpage.err.find("multiple of"), std::string::npos) << badpage.err;

  const std::string dir = test::temp_dir("store_cli");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(128, 96, 3), image);
  const auto t = test::run_cli(
      {"tokenize", image, "--budget", "20", "--dtype", "f16", "--store", "--json", "-o", dir + "/tokens.safetensors"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const auto s = nlohmann::json::parse(t.out)["store"];
  const int64_t kept = s["kept_tokens"].get<int64_t>(), tb = s["token_bytes"].get<int64_t>();
  EXPECT_EQ(tb, 16 * 16 * 3 * 2);
  EXPECT_EQ(s["dense_tokens"].get<int64_t>(), 8 * 6);
  EXPECT_EQ(s["pages"].get<int64_t>(), (kept * tb + 65535) / 65536);
  // What the store gave back is what the token file holds (exit 0 alone says only that the
  // CLI's own comparison passed): the patches' N and their bytes' BLAKE2b.
  const SafetensorsFile file = SafetensorsFile::open(dir + "/tokens.safetensors");
  const SafetensorsFile::Entry* patches = file.find("patches");
  ASSERT_NE(patches, nullptr);
  EXPECT_EQ(patches->shape.at(0), kept);
  EXPECT_EQ(s["gathered_blake2b"].get<std::string>(), blake2b_hex(file.data(*patches)));
  const auto u8 = test::run_cli({"tokenize", image, "--dtype", "u8", "--store"});
  EXPECT_EQ(u8.exit_code, 2);
  EXPECT_NE(u8.err.find("--store needs float tokens"), std::string::npos) << u8.err;
}


#ifdef FOVEA_HAVE_VULKAN
// Every backend in one store-bench run: the same seed table, and the bind speed-up reported.
TEST(StoreCli, StoreBenchReportsEveryBackend) {
  // One cheap codec (int8) for the compressed table: the default set trains PQ and OPQ with FAISS,
  // 40 s of this test for nothing it checks (StoreBenchAndTokenizeStore checks the table; the
  // codecs themselves are tested in test_codec*.cpp).
  const auto r = test::run_cli({"store-bench", "--reps", "1", "--bind-pages", "32", "--codecs", "int8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["seed_table"].size(), 3u) << r.out;
  ASSERT_EQ(j["compressed_seed_table"].size(), 3u) << r.out;  // int8 on every backend
  for (const auto& t : j["compressed_seed_table"]) EXPECT_EQ(t["codec"], "int8");
  // (Every backend's gather returning the written bytes is what exit 0 means here: store-bench
  // fails otherwise. tests/test_store.cpp compares the backends byte for byte.)
  for (const auto& t : j["seed_table"]) {
    EXPECT_EQ(t["resident_pages"].get<int64_t>(), 138) << t["backend"];
    EXPECT_EQ(t["payload_bytes"], j["seed_table"][0]["payload_bytes"]) << t["backend"];
  }
  EXPECT_EQ(j["seed_table"][1]["backend"], "vulkan");
  EXPECT_EQ(j["seed_table"][2]["backend"], "vulkan-image");
  EXPECT_EQ(j["backend_binds"].size(), 9u);
  EXPECT_EQ(j["frame_binds"].size(), 9u);
  ASSERT_EQ(j["frame_speedup"].size(), 3u);
  expect_bind_structure(j);
  ASSERT_EQ(j["gather"].size(), 3u);
  const auto text = test::run_cli({"store-bench", "--backend", "vulkan", "--reps", "1", "--bind-pages", "16", "--codecs", "int8"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("A frame's binds, merged vs one page at a time (target: at least 10x faster):"), std::string::npos) << text.out;
}

TEST(StoreCli, TokenizeStoreOnVulkanAndFallback) {
  const std::string dir = test::temp_dir("store_cli_vk");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(128, 96, 3), image);
  nlohmann::json host_store;
  for (const char* backend : {"host", "vulkan", "vulkan-image"}) {
    const auto t = test::run_cli(
        {"tokenize", image, "--budget", "20", "--dtype", "f16", "--store", "--store-backend", backend, "--json"});
    ASSERT_EQ(t.exit_code, 0) << t.err;
    auto s = nlohmann::json::parse(t.out)["store"];
    EXPECT_EQ(s["backend"], backend);
    // Each device store returns the host's bytes (the same tokens: tokenize is deterministic).
    if (std::string(backend) == "host") host_store = s;
    else {
      EXPECT_EQ(s["pages"], host_store["pages"]) << backend;
      EXPECT_EQ(s["gathered_blake2b"], host_store["gathered_blake2b"]) << backend;
    }
  }
  // No Vulkan driver at all: one note on stderr, the host serves, exit 0.
  ::setenv("VK_ICD_FILENAMES", "/nonexistent/fovea-no-icd.json", 1);
  ::setenv("VK_DRIVER_FILES", "/nonexistent/fovea-no-icd.json", 1);
  const auto none = test::run_cli({"tokenize", image, "--budget", "20", "--dtype", "f16", "--store", "--store-backend",
                                   "vulkan", "--json"});
  // One cheap codec: the default set trains PQ and OPQ with FAISS (~12 s alone, ~40 s in a full
  // test queue), which this check of the fallback line does not need.
  const auto bench = test::run_cli({"store-bench", "--reps", "1", "--bind-pages", "8", "--codecs", "int8"});
  ::unsetenv("VK_ICD_FILENAMES");
  ::unsetenv("VK_DRIVER_FILES");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.err.find("fovea: note: the vulkan store backend is not available"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("the host backend serves"), std::string::npos) << none.err;
  EXPECT_EQ(nlohmann::json::parse(none.out)["store"]["backend"], "host");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("vulkan backend: not available"), std::string::npos) << bench.out;
}
#endif

}  // namespace
}  // namespace fovea
