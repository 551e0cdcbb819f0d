// Limits: absurd sizes get one clear error before any large allocation, in the
// library and through the CLI: decompression-bomb headers (PNG and JPEG claiming 60000x60000),
// budgets above 2^24, patch 1, a 65535x1 image, checkpoints claiming 2^40 elements (a header
// that lies, and a sparse file whose header is true), huge but consistent model dimensions, and
// a video of 10^6 frames with --max-frames (a generator behind a named pipe).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <zlib.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/exec.hpp"
#include "fovea/image.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/version_gen.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

void expect_one_line_error(const test::RunResult& r, int code, const std::string& fragment) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("fovea: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << r.err;
}

template <typename F> Error caught(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a fovea::Error";
  return Error(Errc::internal, "none");
}

void put(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A real PNG whose IHDR then claims width x height (CRC fixed, so only the size is wrong).
std::vector<uint8_t> png_claiming(uint32_t width, uint32_t height) {
  std::vector<uint8_t> png = encode_png(test::gradient_image(8, 8, 3));
  // Signature (8), IHDR length (4), "IHDR" (4), width at 16, height at 20, CRC at 29.
  for (int i = 0; i < 4; ++i) {
    png[size_t(16 + i)] = uint8_t(width >> (24 - 8 * i));
    png[size_t(20 + i)] = uint8_t(height >> (24 - 8 * i));
  }
  const uint32_t crc = uint32_t(crc32(0, png.data() + 12, 17));
  for (int i = 0; i < 4; ++i) png[size_t(29 + i)] = uint8_t(crc >> (24 - 8 * i));
  return png;
}

// A real JPEG whose SOF marker then claims width x height.
std::vector<uint8_t> jpeg_claiming(uint16_t width, uint16_t height) {
  std::vector<uint8_t> jpg = encode_jpeg(test::gradient_image(16, 16, 3), 80);
  for (size_t i = 2; i + 9 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && (jpg[i + 1] == 0xC0 || jpg[i + 1] == 0xC2)) {
      jpg[i + 5] = uint8_t(height >> 8);
      jpg[i + 6] = uint8_t(height);
      jpg[i + 7] = uint8_t(width >> 8);
      jpg[i + 8] = uint8_t(width);
      return jpg;
    }
  ADD_FAILURE() << "no SOF marker";
  return jpg;
}

TEST(Limits, DecompressionBombHeadersAreRefusedBeforeDecoding) {
  for (const auto& item : {std::pair{std::string("bomb.png"), png_claiming(60000, 60000)},
                           std::pair{std::string("bomb.jpg"), jpeg_claiming(60000, 60000)}}) {
    const std::string& name = item.first;  // (not a structured binding: clang 14 cannot capture those)
    const std::vector<uint8_t>& bytes = item.second;
    SCOPED_TRACE(name);
    const Error e = caught([&] { (void)decode_image(bytes, {}, name); });
    EXPECT_EQ(e.code(), Errc::limit_exceeded) << e.what();
    EXPECT_NE(std::string(e.what()).find("60000x60000 = 3600000000 pixels, over the limit"), std::string::npos) << e.what();
    EXPECT_EQ(caught([&] { (void)decode_image_f32(bytes, {}, name); }).code(), Errc::limit_exceeded);
    const std::string dir = test::temp_dir("bomb");
    put(dir + "/" + name, bytes);
    expect_one_line_error(test::run_cli({"tokenize", dir + "/" + name, "-o", dir + "/t.safetensors"}), 1, "over the limit");
    EXPECT_FALSE(std::ifstream(dir + "/t.safetensors").good());
  }
  // The limit is the caller's: a lower one refuses a smaller claim, with the same message.
  LoadOptions small;
  small.max_pixels = 1000;
  EXPECT_EQ(caught([&] { (void)decode_image(png_claiming(100, 11), small); }).code(), Errc::limit_exceeded);
}

TEST(Limits, BudgetsAbove2To24) {
  const std::string dir = test::temp_dir("budget");
  save_png(test::gradient_image(64, 48, 3), dir + "/in.png");
  expect_one_line_error(test::run_cli({"tokenize", dir + "/in.png", "--budget", "16777217"}), 2, "--budget");
  expect_one_line_error(test::run_cli({"tokenize", dir + "/in.png", "--budget", "99999999999999999999"}), 2, "--budget");
  // The library takes any int budget: the tokens never exceed the full-resolution grid.
  for (int budget : {1 << 24, (1 << 24) + 1, 1 << 30, INT_MAX}) {
    for (bool uniform : {false, true}) {
      Executor ex;
      TokenizeParams p;
      p.alloc.budget_tokens = budget;
      p.uniform = uniform;
      const Tokenization t = tokenize(test::gradient_image(64, 48, 3), {}, p, ex);
      EXPECT_EQ(t.batch.size(), 4 * 3) << budget << (uniform ? " uniform" : "");
    }
  }
}

TEST(Limits, PatchOne) {
  const std::string dir = test::temp_dir("patch1");
  save_png(test::gradient_image(40, 30, 3), dir + "/in.png");
  expect_one_line_error(test::run_cli({"tokenize", dir + "/in.png", "--patch", "1"}), 2, "--patch");
  // The library refuses it too, before any stage runs, as it does 0 and negative sizes.
  Executor ex;
  TokenizeParams p;
  p.patch_px = 1;
  const Error e = caught([&] { tokenize(test::gradient_image(40, 30, 3), {}, p, ex); });
  EXPECT_EQ(e.code(), Errc::invalid_argument);
  EXPECT_STREQ(e.what(), "patch size must be in [2, 256] pixels, got 1");
  p.patch_px = 0;
  EXPECT_EQ(caught([&] { tokenize(test::gradient_image(40, 30, 3), {}, p, ex); }).code(), Errc::invalid_argument);
  p.patch_px = -16;
  EXPECT_EQ(caught([&] { tokenize(test::gradient_image(40, 30, 3), {}, p, ex); }).code(), Errc::invalid_argument);
}

// Found by fuzz_tokenize (UBSan: float-to-int overflow in the relevance stage's fixation
// distance): a fixation anywhere on the float line is valid input (outside the image it just
// pulls tokens to the nearest edge) and must not overflow an int conversion. Under the ASan +
// UBSan suite this aborts if it does; in every build the tokens stay within the budget.
TEST(Limits, FixationsFarOutsideTheImage) {
  Executor ex({.threads = 1});
  TokenizeParams p;
  p.alloc.budget_tokens = 24;
  for (const float v : {4.35e9f, -4.35e9f, 3.0e38f, -3.0e38f}) {
    Query q;
    q.fixations.push_back({v, 20.0f, 1.0f});
    q.fixations.push_back({30.0f, v, 1.0f});
    const Tokenization t = tokenize(test::random_image(64, 48, 3, 7), q, p, ex);
    EXPECT_GT(t.batch.size(), 0);
    EXPECT_LE(t.batch.size(), 24) << v;
  }
}

TEST(Limits, Image65535x1) {
  const std::string dir = test::temp_dir("wide");
  save_png(test::gradient_image(65535, 1, 3), dir + "/wide.png");
  // 4096 tiles in one row: more than the default budget can cover at the coarsest level the
  // 1-pixel height allows, which is a clear error naming the smallest budget that works.
  const test::RunResult r = test::run_cli({"tokenize", dir + "/wide.png", "-o", dir + "/t.safetensors"});
  expect_one_line_error(r, 2, "budget of 273");
  const test::RunResult ok = test::run_cli({"tokenize", dir + "/wide.png", "--budget", "4096", "--patch", "16",
                                            "-o", dir + "/t.safetensors", "--json"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  const SafetensorsFile f = SafetensorsFile::open(dir + "/t.safetensors");
  ASSERT_NE(f.find("patches"), nullptr);
  EXPECT_EQ(f.find("patches")->shape, (std::vector<int64_t>{4096, 3, 16, 16}));
  // The transposed image too.
  save_png(test::gradient_image(1, 65535, 1), dir + "/tall.png");
  EXPECT_EQ(test::run_cli({"tokenize", dir + "/tall.png", "--budget", "4096", "-o", dir + "/t2.safetensors"}).exit_code, 0);
}

// A valid RGB PNG of width x height, every sample 128 (zlib-compressed rows: small on disk).
std::vector<uint8_t> flat_png(uint32_t width, uint32_t height) {
  std::vector<uint8_t> raw;
  raw.reserve(size_t(height) * (1 + 3 * size_t(width)));
  for (uint32_t y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), 3 * size_t(width), 128);
  }
  uLongf zn = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(zn);
  EXPECT_EQ(compress2(z.data(), &zn, raw.data(), uLong(raw.size()), 9), Z_OK);
  z.resize(zn);
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto be32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) png.push_back(uint8_t(v >> (24 - 8 * i)));
  };
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    be32(uint32_t(data.size()));
    const size_t at = png.size();
    png.insert(png.end(), type, type + 4);
    png.insert(png.end(), data.begin(), data.end());
    be32(uint32_t(crc32(0, png.data() + at, uInt(png.size() - at))));
  };
  std::vector<uint8_t> ihdr;
  for (uint32_t v : {width, height})
    for (int i = 0; i < 4; ++i) ihdr.push_back(uint8_t(v >> (24 - 8 * i)));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  chunk("IHDR", ihdr);
  chunk("IDAT", z);
  chunk("IEND", {});
  return png;
}

// Image rows are at least 64 samples apart, so a 1-pixel-wide image stores 64 times its pixels:
// a 78 KB PNG of 1x20000000 (a fifth of the pixel limit) took 5.7 GB and 13 s before the limit
// counted stored rows. Now 1x2000000 (2 M pixels, 128 M stored) is refused at its header, in
// the library, the CLI (small peak memory) and a video of that frame size.
TEST(Limits, NarrowImagesCountTheirRowsAsStored) {
  const std::vector<uint8_t> png = flat_png(1, 2'000'000);
  const Error e = caught([&] { (void)decode_image(png, {}, "tall.png"); });
  EXPECT_EQ(e.code(), Errc::limit_exceeded) << e.what();
  EXPECT_NE(std::string(e.what()).find("1x2000000: rows this narrow are stored 64 pixels wide"), std::string::npos)
      << e.what();
  // The check is about memory, not shape: 1x300000 stores 19.2 M pixels (over the 2^24 allowance
  // for padding), refused under a limit of 10 M and decoded under 20 M. Below the allowance a
  // narrow image is judged by its pixels alone (24x16 under a limit of 384:
  // ImageIoLimits.HugeDeclaredExtentsAreRefusedBeforeAllocating).
  const std::vector<uint8_t> mid = flat_png(1, 300'000);
  LoadOptions tight, roomy;
  tight.max_pixels = 10'000'000;
  roomy.max_pixels = 20'000'000;
  EXPECT_EQ(caught([&] { (void)decode_image(mid, tight, "mid.png"); }).code(), Errc::limit_exceeded);
  const ImageU8 img = decode_image(mid, roomy, "mid.png");
  EXPECT_EQ(img.width(), 1);
  EXPECT_EQ(img.height(), 300'000);
  EXPECT_EQ(img.row(2, 299'999)[0], 128);

  const std::string dir = test::temp_dir("narrow");
  put(dir + "/tall.png", png);
  expect_one_line_error(test::run_cli({"tokenize", dir + "/tall.png", "--budget", "1000000", "-o", dir + "/t.safetensors"}),
                        1, "stored 64 pixels wide");
  EXPECT_FALSE(std::ifstream(dir + "/t.safetensors").good());
  rusage ru{};  // the children reaped so far: that CLI run only
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &ru), 0);
  EXPECT_LT(ru.ru_maxrss, 256L << 10) << "KiB";  // it decoded the 1x2000000 image in ~600 MB before

#if FOVEA_BUILT_WITH_ENCODER  // (the video stage needs the encoder)
  {  // One Y4M frame of 1x2000000 (4:2:0: chroma 1x1000000).
    std::ofstream y4m(dir + "/tall.y4m", std::ios::binary);
    y4m << "YUV4MPEG2 W1 H2000000 F1:1 Ip A1:1 C420jpeg\nFRAME\n";
    const std::string plane(2'000'000, char(100)), chroma(1'000'000, char(128));
    y4m << plane << chroma << chroma;
  }
  expect_one_line_error(test::run_cli({"video", dir + "/tall.y4m", "-o", dir + "/v.safetensors"}), 1,
                        "stored 64 pixels wide");
  EXPECT_FALSE(std::ifstream(dir + "/v.safetensors").good());
#endif
}

// A safetensors file with these entries, whose data buffer is `buffer_bytes` long: written as a
// sparse file (the buffer is a hole), so a header that tells the truth about 2^40 elements costs
// no disk.
void sparse_safetensors(const std::string& path, const nlohmann::json& header, uint64_t buffer_bytes) {
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[size_t(i)] = char(uint8_t(uint64_t(h.size()) >> (8 * i)));
  head += h;
  std::ofstream(path, std::ios::binary) << head;
  ASSERT_EQ(::truncate(path.c_str(), off_t(head.size() + buffer_bytes)), 0) << "cannot make a sparse file";
}

TEST(Limits, CheckpointClaiming2To40Elements) {
#if !FOVEA_BUILT_WITH_ENCODER
  GTEST_SKIP() << "this build has no encoder (FOVEA_WITH_ENCODER=OFF): no 'fovea encode'";
#endif
  const std::string dir = test::temp_dir("huge_ckpt");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 64, 3), image);
  const uint64_t e40 = uint64_t(1) << 40;

  // A header that lies: 2^40 F32 elements in a 16-byte buffer.
  nlohmann::json lie = {{"w", {{"dtype", "F32"}, {"shape", {e40}}, {"data_offsets", {0, 4 * e40}}}}};
  sparse_safetensors(dir + "/lie.safetensors", lie, 16);
  EXPECT_EQ(caught([&] { SafetensorsFile::open(dir + "/lie.safetensors"); }).code(), Errc::corrupt_data);
  expect_one_line_error(test::run_cli({"encode", image, "--model", dir + "/lie.safetensors"}), 1, "ends at byte");

  // A header that tells the truth: a sparse 4 TiB file holding a patch embedding of 2^40 F32
  // elements ([2^32, 1, 16, 16]): the hidden size is refused before anything is read.
  const std::string p = "vision_model.";
  nlohmann::json truth = {
      {p + "embeddings.patch_embedding.weight", {{"dtype", "F32"}, {"shape", {uint64_t(1) << 32, 1, 16, 16}}, {"data_offsets", {0, 4 * e40}}}},
      {p + "embeddings.class_embedding", {{"dtype", "F32"}, {"shape", {uint64_t(1) << 32}}, {"data_offsets", {4 * e40, 4 * e40 + (uint64_t(16) << 30)}}}}};
  sparse_safetensors(dir + "/truth.safetensors", truth, 4 * e40 + (uint64_t(16) << 30));
  expect_one_line_error(test::run_cli({"encode", image, "--model", dir + "/truth.safetensors"}), 1,
                        "hidden size (vision_model.embeddings.patch_embedding.weight dim 0) is 4294967296");

  // Dimensions each within range, but a tensor larger than this machine's memory: refused
  // before it is allocated (D = 65536, P = 1024: the patch embedding alone is 768 GiB).
  const uint64_t D = 65536, P = 1024, pe = D * 3 * P * P * 4, pos = 2 * D * 4, fc1 = 4 * D * D * 4;
  nlohmann::json big = {
      {p + "embeddings.patch_embedding.weight", {{"dtype", "F32"}, {"shape", {D, 3, P, P}}, {"data_offsets", {0, pe}}}},
      {p + "embeddings.class_embedding", {{"dtype", "F32"}, {"shape", {D}}, {"data_offsets", {pe, pe + D * 4}}}},
      {p + "embeddings.position_embedding.weight", {{"dtype", "F32"}, {"shape", {2, D}}, {"data_offsets", {pe + D * 4, pe + D * 4 + pos}}}},
      {p + "encoder.layers.0.mlp.fc1.weight", {{"dtype", "F32"}, {"shape", {4 * D, D}}, {"data_offsets", {pe + D * 4 + pos, pe + D * 4 + pos + fc1}}}}};
  sparse_safetensors(dir + "/big.safetensors", big, pe + D * 4 + pos + fc1);
  expect_one_line_error(test::run_cli({"encode", image, "--model", dir + "/big.safetensors"}), 1, "more than this machine's");
}

// One stray tensor name with a huge layer index: the loaders look up every layer below the
// highest index, so "blocks.999999.norm1.weight" asked for 12 million tensors (45 s, 2.7 GB and a
// 420 MB error line before the limit). Now refused at once, naming the tensor.
TEST(Limits, AStrayLayerIndexIsRefusedBeforeTheLayersAreListed) {
#if !FOVEA_BUILT_WITH_ENCODER
  GTEST_SKIP() << "this build has no encoder (FOVEA_WITH_ENCODER=OFF): no 'fovea encode'";
#endif
  const std::string dir = test::temp_dir("stray_layer");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(64, 64, 3), image);
  // The least a timm ViT has before its layers are counted, then the stray name.
  nlohmann::json h;
  uint64_t end = 0;
  auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
    uint64_t bytes = 4;
    for (uint64_t d : shape) bytes *= d;
    h[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {end, end + bytes}}};
    end += bytes;
  };
  add("patch_embed.proj.weight", {32, 3, 16, 16});
  add("cls_token", {1, 1, 32});
  add("pos_embed", {1, 17, 32});
  add("blocks.0.attn.qkv.weight", {96, 32});
  const uint64_t before = end;
  add("blocks.999999.norm1.weight", {32});
  sparse_safetensors(dir + "/stray.safetensors", h, end);
  const test::RunResult r = test::run_cli({"model", dir + "/stray.safetensors"});
  expect_one_line_error(r, 1, "tensor blocks.999999.norm1.weight is layer 999999; fovea runs at most 4096 layers");
  EXPECT_LT(r.err.size(), 400u) << r.err;

  // Below the limit, a gap still lists what is missing, but the first dozen names only.
  h.erase("blocks.999999.norm1.weight");
  end = before;
  add("blocks.4000.norm1.weight", {32});
  sparse_safetensors(dir + "/gap.safetensors", h, end);
  const test::RunResult g = test::run_cli({"model", dir + "/gap.safetensors"});
  expect_one_line_error(g, 1, "blocks.0.norm1.weight [32], ");
  EXPECT_NE(g.err.find(" more"), std::string::npos) << g.err;  // "missing N tensor(s): <12 names> and N-12 more"
  EXPECT_LT(g.err.size(), 4200u);
}

// A system that refuses threads (RLIMIT_NPROC, a pids cgroup, address space): the Executor
// started some workers, threw from its constructor, and destroying the condition variables they
// waited on blocked forever (found by tests/sweeps/python_api_sweep.py: tokenize(threads=1024) under a
// 4 GiB RLIMIT_AS never returned). Now an Error naming the count. Run in a child with an alarm,
// so the old behaviour fails the test instead of hanging it.
TEST(Limits, ThreadsTheSystemRefusesAreAnErrorNotAHang) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FOVEA_LIMITS_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(FOVEA_LIMITS_SANITIZED)
  GTEST_SKIP() << "the sanitizers reserve terabytes of address space: RLIMIT_AS cannot be set";
#endif
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(30);
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;  // the address space in use now
    const rlim_t limit = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t(256) << 20);
    const struct rlimit rl{limit, limit};
    ::setrlimit(RLIMIT_AS, &rl);  // ~30 more 8 MiB thread stacks at most
    try {
      Executor ex(ExecConfig{.threads = 1024});
      ::_exit(2);  // the system gave 1023 threads after all: the test proves nothing
    } catch (const Error& e) {
      const bool ok = e.code() == Errc::limit_exceeded && std::string(e.what()).find("worker threads") != std::string::npos;
      ::_exit(ok ? 0 : 3);
    } catch (...) {
      ::_exit(4);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status) << " (SIGALRM: the hang)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no thread refused; 3: another error; 4: not a fovea::Error";
}

// A FIFO given as an image, a checkpoint or a token file: refused at once ("not a regular
// file"), where open(2) used to wait for a writer forever.
TEST(Limits, FifosAreRefusedWithoutWaitingForAWriter) {
  const std::string dir = test::temp_dir("fifo");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::vector<std::vector<std::string>> commands = {{"tokenize", fifo, "-o", dir + "/t.safetensors"},
                                                    {"decompress", fifo, "-o", dir + "/d.safetensors"}};
#if FOVEA_BUILT_WITH_ENCODER
  commands.push_back({"model", fifo});
#endif
  for (const auto& args : commands) {
    const pid_t pid = ::fork();  // run_cli waits without a timeout: the alarm bounds it
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(60);
      const test::RunResult r = test::run_cli(args);
      ::_exit(r.exit_code == 1 && r.err.find("not a regular file") != std::string::npos ? 0 : 10 + r.exit_code);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << args[0] << ": status " << status;
  }
}

#if FOVEA_BUILT_WITH_ENCODER
// A config.json of 200,000 nested '[': the parse was fine, but copying the vision part recursed
// once per level and overflowed the stack (SIGSEGV). Nesting is now bounded at 64 levels.
TEST(Limits, ADeeplyNestedConfigIsAnErrorNotAStackOverflow) {
  const std::string dir = test::temp_dir("deep_config");
  const std::string src = test::source_dir() + "/tests/data/encoder/hf_vit";
  std::filesystem::copy_file(src + "/model.safetensors", dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << "{\"model_type\": \"vit\", \"x\": " << std::string(200000, '[')
                                      << std::string(200000, ']') << "}";
  expect_one_line_error(test::run_cli({"model", dir + "/model.safetensors"}), 1, "nests deeper than 64 levels");
}
#endif

// A video of 10^6 frames: a y4m stream (32x24, 4:2:0, every frame different) written into a
// named pipe by a generator thread, up to 10^6 frames, until the reader goes away. `fovea video
// --max-frames 5` must stop after 5 frames: the generator gets EPIPE after a bounded number of
// frames (what the demuxer probed plus the pipe's buffer), and the CLI's memory stays small.
TEST(Limits, VideoOfAMillionFramesWithMaxFrames) {
#if !FOVEA_BUILT_WITH_ENCODER
  GTEST_SKIP() << "this build has no encoder, hence no video stage: no 'fovea video'";
#endif
  const std::string dir = test::temp_dir("limits_video");
  const std::string fifo = dir + "/stream.y4m", out = dir + "/v.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  constexpr int64_t kFrames = 1'000'000;
  constexpr int W = 32, H = 24;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> written{0};
  struct sigaction ignore{}, old{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &old), 0);  // a closed pipe is EPIPE for the writer
  std::thread generator([&] {
    int fd = -1;
    while (fd < 0 && !stop) {  // non-blocking until the CLI opens the pipe (or never does)
      fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (fd < 0) return;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    auto put = [&](const std::string& b) {
      for (size_t at = 0; at < b.size();) {
        const ssize_t w = ::write(fd, b.data() + at, b.size() - at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        at += size_t(w);
      }
      return true;
    };
    bool ok = put("YUV4MPEG2 W" + std::to_string(W) + " H" + std::to_string(H) + " F25:1 Ip A1:1 C420jpeg\n");
    std::string frame = "FRAME\n" + std::string(size_t(W * H * 3 / 2), '\0');
    for (int64_t f = 0; ok && f < kFrames && !stop; ++f) {
      for (int i = 0; i < W * H; ++i) frame[6 + size_t(i)] = char((i * 7 + f * 13) & 0xff);  // moving ramp
      ok = put(frame);
      if (ok) ++written;
    }
    ::close(fd);
  });
  const test::RunResult r =
      test::run_cli({"video", fifo, "--max-frames", "5", "--budget", "8", "--threads", "1", "-o", out, "--json"});
  stop = true;
  generator.join();
  ::sigaction(SIGPIPE, &old, nullptr);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["frames"], 5);
  const SafetensorsFile f = SafetensorsFile::open(out);
  EXPECT_EQ(f.find("frame_offsets")->shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(f.metadata().at("frames"), "5");
  // Bounded work: the generator was cut off after the frames the CLI read (the demuxer's probe
  // reads ahead a few MiB at most: ~5000 frames of 1158 bytes), never the million.
  std::printf("video limit: the generator wrote %lld of %lld frames before the CLI closed the pipe\n",
              (long long)written.load(), (long long)kFrames);
  EXPECT_LT(written.load(), 20000);
  // Bounded memory: the largest child this test process reaped (only the CLI run) stayed small.
  rusage ru{};
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &ru), 0);
  std::printf("video limit: the CLI's peak RSS %ld MiB\n", ru.ru_maxrss / 1024);
  EXPECT_LT(ru.ru_maxrss, 1L << 20) << "KiB";  // 1 GiB
}

}  // namespace
}  // namespace fovea
