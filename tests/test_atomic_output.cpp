// Atomic outputs, proven: the CLI is killed with SIGKILL at seeded random points
// while it runs, many times, most of them while it writes (the kill lands as soon as a
// temporary file shows up in the output folder, plus a random delay). Afterwards every output
// path holds either the file that was there before or the complete new file (byte-identical to
// an uninterrupted run's), never a truncated one; a temporary file left behind is complete too
// (outputs are written unnamed and named only once complete: write_file_atomic, AtomicFile).
// Jobs: tokenize (token file, overlay PNG, seen PNG), encode (embeddings), video (the streamed
// token file: spill file while frames arrive, then the final file) and compress (the codebook
// and the compressed file).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fovea/files.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tensor.hpp"
#include "fovea/version_gen.hpp"
#include "test_util.hpp"

extern char** environ;

namespace fovea {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

pid_t spawn_cli(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s{FOVEA_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot spawn the fovea CLI");
  return pid;
}

std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) out.push_back(e.path().string());
  return out;
}

// Whether process `pid` has a file open in `dir`: an output being written (a named temporary
// file, or an unnamed O_TMPFILE one, which /proc shows as "dir/#inode (deleted)").
bool writing_into(pid_t pid, const std::string& dir) {
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fds, ec)) {
    std::error_code ec2;
    const fs::path target = fs::read_symlink(e.path(), ec2);
    if (!ec2 && target.string().rfind(dir + "/", 0) == 0) return true;
  }
  return false;
}

struct Job {
  std::string name;
  std::vector<std::string> args;     // "{out}" is replaced by the output folder
  std::vector<std::string> outputs;   // file names in the output folder
};

std::vector<std::string> with_dir(std::vector<std::string> args, const std::string& dir) {
  for (auto& a : args) {
    const size_t at = a.find("{out}");
    if (at != std::string::npos) a.replace(at, 5, dir);
  }
  return args;
}

void kill_at_random_points(const Job& job, int kills, uint64_t seed) {
  const std::string dir = test::temp_dir("atomic_" + job.name);
  // The reference: one uninterrupted run, and how long it takes.
  const auto t0 = std::chrono::steady_clock::now();
  const test::RunResult ref = test::run_cli(with_dir(job.args, dir));
  const double run_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  std::vector<std::string> want;
  for (const std::string& o : job.outputs) {
    want.push_back(slurp(dir + "/" + o));
    ASSERT_GT(want.back().size(), 64u) << o;
  }
  std::mt19937_64 rng(seed);
  int old_kept = 0, new_complete = 0, killed_writing = 0, leftovers = 0;
  for (int i = 0; i < kills; ++i) {
    SCOPED_TRACE("kill " + std::to_string(i));
    for (const std::string& t : temp_files(dir)) fs::remove(t);
    const std::string old = "the previous file, run " + std::to_string(i) + "\n";
    for (const std::string& o : job.outputs) put(dir + "/" + o, old);
    const pid_t pid = spawn_cli(with_dir(job.args, dir));
    if (i % 3 != 2) {
      // While writing: as soon as an output file is open, after 0..2 ms.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(int64_t(run_us * 3 + 2e6));
      bool seen = false;
      while (!seen && std::chrono::steady_clock::now() < deadline) {
        seen = writing_into(pid, dir) || !temp_files(dir).empty();
        if (!seen) {
          int status = 0;
          if (waitpid(pid, &status, WNOHANG) == pid) break;  // finished before we saw one
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      }
      killed_writing += seen;
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(int64_t(rng() % uint64_t(run_us * 1.2 + 1))));
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    for (size_t k = 0; k < job.outputs.size(); ++k) {
      const std::string got = slurp(dir + "/" + job.outputs[k]);
      const bool is_old = got == old, is_new = got == want[k];
      EXPECT_TRUE(is_old || is_new) << job.outputs[k] << ": " << got.size() << " bytes, neither the old file ("
                                    << old.size() << ") nor the complete new one (" << want[k].size() << ")";
      old_kept += is_old;
      new_complete += is_new;
    }
    // Outputs are written unnamed (O_TMPFILE) and named only once complete, so a temporary file
    // the kill left behind (the instant between naming it and the rename) is a complete one.
    for (const std::string& t : temp_files(dir)) {
      ++leftovers;
      const std::string got = slurp(t);
      bool complete = false;
      for (const std::string& w : want) complete |= got == w;
      EXPECT_TRUE(complete) << t << " is a truncated temporary file (" << got.size() << " bytes)";
      fs::remove(t);
    }
  }
  std::printf("%s: %d kills (%d while an output was open): %d outputs kept the old file, %d were complete new "
              "files, never a truncated one; %d (complete) temporary files left behind\n",
              job.name.c_str(), kills, killed_writing, old_kept, new_complete, leftovers);
  EXPECT_GT(killed_writing, 0) << "no kill landed while the CLI was writing";
}

// Outputs that cannot be replaced are written in place: a FIFO (as a device such as /dev/null
// or /dev/full is), a descriptor alias (/dev/fd/N, /dev/stdout). Renaming over them, which the
// atomic write did before, turned /dev/full into a regular file when run as root. A link to a
// regular file replaces the file and keeps the link; a folder is an error.
TEST(AtomicOutput, PipesDescriptorsAndLinksAreWrittenNotReplaced) {
  const std::string dir = test::temp_dir("AtomicOutput_special");
  const std::vector<uint8_t> bytes(200000, 7);  // more than a pipe's buffer

  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string link_to_fifo = dir + "/link_to_fifo";
  fs::create_symlink(fifo, link_to_fifo);
  for (const std::string& path : {fifo, link_to_fifo}) {
    // The keeper (a writer that writes nothing) lets the reader open without blocking and see
    // EOF once it is closed: a write that never reaches the FIFO fails the test, not hangs it.
    const int keeper = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(keeper, 0);
    std::string got;
    std::thread reader([&] { got = slurp(fifo); });
    write_file_atomic(path, bytes);
    ::close(keeper);
    reader.join();
    EXPECT_EQ(got.size(), bytes.size()) << path;
    EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo))) << path;
  }
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link_to_fifo)));

  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  std::string got;
  std::thread reader([&] {
    char buf[65536];
    for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
  });
  write_file_atomic("/dev/fd/" + std::to_string(p[1]), bytes);
  ::close(p[1]);
  reader.join();
  ::close(p[0]);
  EXPECT_EQ(got.size(), bytes.size());

  const std::string real = dir + "/real.bin", link = dir + "/link.bin";
  put(real, "old");
  fs::create_symlink(real, link);
  write_file_atomic(link, bytes);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(fs::file_size(real), bytes.size());
  for (const auto& e : fs::directory_iterator(dir))  // no temporary left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();

  try {
    write_file_atomic(dir, bytes);
    ADD_FAILURE() << "wrote over a folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::io);
    EXPECT_NE(std::string(e.what()).find("it is a folder"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(dir));
}

TEST(AtomicOutput, SigkillDuringTokenizeLeavesOldOrCompleteFiles) {
  const std::string image = test::source_dir() + "/data/astronaut.jpg";
  // A large f32 token file (~12 MiB) so the write takes a while; two PNGs after it.
  kill_at_random_points({"tokenize",
                         {"tokenize", image, "--budget", "4000", "--threads", "1", "-o", "{out}/tokens.safetensors",
                          "--overlay", "{out}/overlay.png", "--seen", "{out}/seen.png"},
                         {"tokens.safetensors", "overlay.png", "seen.png"}},
                        30, 19);
}

TEST(AtomicOutput, SigkillDuringEncodeLeavesOldOrCompleteFile) {
#if !FOVEA_BUILT_WITH_ENCODER
  GTEST_SKIP() << "this build has no encoder (FOVEA_WITH_ENCODER=OFF): no 'fovea encode'";
#endif
  const std::string image = test::source_dir() + "/data/astronaut.jpg";
  const std::string model = test::source_dir() + "/tests/data/encoder/clip/model.safetensors";
  kill_at_random_points({"encode",
                         {"encode", image, "--model", model, "--budget", "3000", "--threads", "1", "-o",
                          "{out}/embeddings.safetensors"},
                         {"embeddings.safetensors"}},
                        15, 20);
}

TEST(AtomicOutput, SigkillDuringVideoLeavesOldOrCompleteFile) {
#if !FOVEA_BUILT_WITH_ENCODER
  GTEST_SKIP() << "this build has no encoder, hence no video stage: no 'fovea video'";
#endif
  const std::string clip = test::source_dir() + "/tests/data/video/small.mp4";
  if (!fs::exists(clip)) GTEST_SKIP() << clip << " missing";
  // 12 frames of patches (f32, 3x16x16 per token): the spill file grows frame by frame, then
  // finish() writes the ~2 MiB file.
  kill_at_random_points({"video",
                         {"video", clip, "--fixation", "120,30", "--budget", "60", "--reuse", "exact", "--threads", "1",
                          "-o", "{out}/video.safetensors"},
                         {"video.safetensors"}},
                        20, 21);
}

TEST(AtomicOutput, SigkillDuringCompressLeavesOldOrCompleteFiles) {
  // 6000 random 256-d embeddings (6 MiB): int8 trained on them, the codebook and the codes written.
  const std::string in_dir = test::temp_dir("atomic_compress_in");
  const int64_t n = 6000, d = 256;
  Tensor e(DType::f32, {n, d}), p(DType::f32, {n, 4}), l(DType::i32, {n});
  std::mt19937 rng(22);
  std::normal_distribution<float> g;
  for (int64_t i = 0; i < e.numel(); ++i) e.data<float>()[i] = g(rng);
  for (int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] = float(i % 97);
  for (int64_t i = 0; i < n; ++i) l.data<int32_t>()[i] = int32_t(i % 3);
  const std::string emb = in_dir + "/emb.safetensors";
  save_safetensors(emb, {{"embeddings", &e}, {"positions", &p}, {"levels", &l}},
                   {{"format", "fovea.embeddings"}, {"model", "test"}});
  kill_at_random_points({"compress",
                         {"compress", emb, "--codec", "int8", "--train", emb, "--codebook", "{out}/int8.cb.safetensors",
                          "-o", "{out}/codes.safetensors"},
                         {"int8.cb.safetensors", "codes.safetensors"}},
                        20, 22);
}

// identify_file names a file's kind and its media category: callers decide by the category
// (a video given to `tokenize` gets a hint, an audio file given to `video` gets FFmpeg's own
// error), never by the wording.
TEST(IdentifyFile, NamesTheKindAndItsMedia) {
  using M = FileKind::Media;
  auto id = [](std::string_view head) {
    return identify_file(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(head.data()), head.size()));
  };
  using namespace std::string_view_literals;
  const struct {
    std::string_view head;
    M media;
    std::string_view says;
  } cases[] = {
      {"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"sv, M::image, "PNG"},
      {"\0\0\0\x20" "ftypisom\0\0\x02\0"sv, M::video, "MP4"},
      {"\0\0\0\x1c" "ftypavif\0\0\0\0"sv, M::image, "AVIF"},
      {"\x1A\x45\xDF\xA3\x01\0\0\0"sv, M::video, "Matroska"},
      {"OggS\0\x02\0\0\0\0"sv, M::av, "Ogg"},
      {"ID3\x04\0\0\0\0\0\0"sv, M::audio, "audio"},
      {"version https://git-lfs.github.com/spec/v1\noid sha256:"sv, M::other, "Git LFS"},
      {"  {\"a\": 1}"sv, M::other, "JSON"},
  };
  for (const auto& c : cases) {
    const FileKind k = id(c.head);
    EXPECT_TRUE(k.known()) << c.says;
    EXPECT_EQ(k.media, c.media) << k.description;
    EXPECT_NE(k.description.find(c.says), std::string::npos) << k.description;
  }
  const FileKind none = id("\x01\x02\x03\x04\xfe\xff"sv);
  EXPECT_FALSE(none.known());
  EXPECT_EQ(none.media, M::unknown);
  EXPECT_FALSE(identify_file(std::string("/nonexistent/fovea/identify")).known());
}

}  // namespace
}  // namespace fovea
