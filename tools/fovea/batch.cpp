#include "batch.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <map>
#include <memory>
#include <optional>

#include "cli_util.hpp"
#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/image.hpp"
#include "fovea/tar.hpp"

namespace fovea::cli {

namespace fs = std::filesystem;

namespace {

Error batch_error(const std::string& m) { return Error(Errc::invalid_argument, m); }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_tar(const std::string& path) { return ends_with(lower(path), ".tar"); }
bool is_image_name(const std::string& name) {
  const std::string l = lower(name);
  for (const std::string& ext : image_file_extensions())
    if (ends_with(l, ext)) return true;
  return false;
}
// Writes members through an AtomicFile (fovea/files.hpp): the shard gets its name only in
// finish(); one that is never finished leaves nothing behind. Members are buffered and written
// in 1 MiB pieces.
class TarWriter {
 public:
  explicit TarWriter(const std::string& path) : out_(path) {}
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  void add(const std::string& name, const std::vector<uint8_t>& bytes) {
    if (name.size() > 99) header("././@LongLink", name.size() + 1, 'L'), write(name.c_str(), name.size() + 1);
    header(name.substr(0, 99), bytes.size(), '0');
    write(bytes.data(), bytes.size());
  }
  void finish() {
    static const char zeros[1024] = {};
    append(zeros, sizeof zeros);
    flush();
    out_.commit();
  }

 private:
  void header(const std::string& name, uint64_t size, char type) {
    char h[512] = {};
    std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
    std::snprintf(h + 100, 8, "%07o", 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(size));
    std::snprintf(h + 136, 12, "%011llo", static_cast<unsigned long long>(std::time(nullptr)));
    h[156] = type;
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    write(h, 512);
  }
  void write(const void* p, size_t n) {
    static const char zeros[512] = {};
    append(p, n);
    append(zeros, (512 - n % 512) % 512);
  }
  void append(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buffer_.insert(buffer_.end(), b, b + n);
    if (buffer_.size() >= (size_t(1) << 20)) flush();
  }
  void flush() {
    out_.write(buffer_);
    buffer_.clear();
  }
  AtomicFile out_;
  std::vector<uint8_t> buffer_;
};

// ---- the plan: every image and where its output goes -------------------------------------------

struct Source {
  std::string path;  // a file, or a .tar shard
  bool shard = false;
  int64_t images = 0;
  std::string out;  // file inputs: DIR/<stem>.safetensors; shards: the output shard (or the -o shard)
};

std::string stem(const std::string& path) { return fs::path(path).stem().string(); }

}  // namespace

bool is_batch(const std::vector<std::string>& inputs, const std::string& output) {
  if (inputs.size() != 1) return true;
  std::error_code ec;
  if (fs::is_directory(inputs[0], ec) || is_tar(inputs[0])) return true;
  if (!output.empty() && (output.back() == '/' || fs::is_directory(output, ec) || is_tar(output))) return true;
  return false;
}

nlohmann::json to_json(const BatchReport& r) {
  return {{"images", r.images},
          {"ok", r.ok},
          {"failed", r.failed},
          {"failures", r.failures},
          {"elapsed_s", r.elapsed_s},
          {"images_per_s", r.elapsed_s > 0 ? double(r.ok + r.failed) / r.elapsed_s : 0.0},
          {"first_image_s", r.first_image_s},
          {"steady_images_per_s", r.images > 1 && r.elapsed_s > r.first_image_s
                                      ? double(r.images - 1) / (r.elapsed_s - r.first_image_s)
                                      : 0.0}};
}

int report_batch(const BatchReport& r, const std::string& output, bool json, const nlohmann::json& extra) {
  if (json) {
    nlohmann::json j = extra;
    j["batch"] = to_json(r);
    j["outputs"] = output;
    std::printf("%s\n", json_text(j).c_str());
  } else {
    std::printf("fovea: %lld images, %lld ok, %lld failed, %.2f images/s, %.1f s -> %s\n", (long long)r.images,
                (long long)r.ok, (long long)r.failed, r.elapsed_s > 0 ? r.images / r.elapsed_s : 0.0, r.elapsed_s,
                output.c_str());
  }
  std::fflush(stdout);
  if (r.failed == 0) return 0;
  std::fprintf(stderr, "fovea: error: %lld of %lld images failed (each is named above)\n", (long long)r.failed,
               (long long)r.images);
  return 1;
}

BatchReport run_batch(const std::vector<std::string>& inputs, const std::string& output, const LoadOptions& load,
                      const BatchFn& fn) {
  using Clock = std::chrono::steady_clock;
  if (output.empty()) throw batch_error("batch mode needs -o DIR (one file per image) or -o OUT.tar (one shard)");
  if (ends_with(lower(output), ".safetensors"))
    throw batch_error("-o '" + output + "' is one file, but the inputs are a batch (several images, a directory or a .tar shard): "
              "use -o DIR or -o OUT.tar");
  const bool out_shard = is_tar(output);
  std::error_code ec;
  if (!out_shard && fs::exists(output, ec) && !fs::is_directory(output, ec))
    throw batch_error("-o '" + output + "' exists and is not a directory");

  // Plan every source before any work: typos, empty folders and colliding outputs cost nothing.
  std::vector<Source> sources;
  for (const std::string& in : inputs) {
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> files;
      for (auto it = fs::recursive_directory_iterator(in, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file(ec) && is_image_name(it->path().filename().string())) files.push_back(it->path().string());
      if (ec) throw Error(Errc::io, "cannot list '" + in + "': " + ec.message());
      std::sort(files.begin(), files.end());
      if (files.empty()) std::fprintf(stderr, "fovea: warning: no image files (%s) in '%s'\n", image_formats(), in.c_str());
      for (auto& f : files) sources.push_back({f, false, 1, ""});
    } else if (is_tar(in)) {
      TarReader r(in);  // Error(io) for a missing shard: an argument, checked now
      Source s{in, true, 0, ""};
      TarMember m;
      try {
        while (r.next(m, is_image_name, false)) ++s.images;
      } catch (const Error& e) {
        // Counted and reported when the batch reaches it.
        s.images = std::max<int64_t>(s.images, 1);
      }
      sources.push_back(s);
    } else {
      if (!fs::exists(in, ec)) throw Error(Errc::io, "cannot open '" + in + "': No such file or directory");
      sources.push_back({in, false, 1, ""});
    }
  }
  std::map<std::string, std::string> claimed;  // output -> input
  for (Source& s : sources) {
    if (out_shard) {
      s.out = output;
      continue;
    }
    s.out = (fs::path(output) / (stem(s.path) + (s.shard ? ".tar" : ".safetensors"))).string();
    auto [it, fresh] = claimed.emplace(s.out, s.path);
    if (!fresh) throw batch_error("'" + s.path + "' and '" + it->second + "' would both write '" + s.out + "'");
  }
  int64_t total = 0;
  for (const Source& s : sources) total += s.images;
  if (total == 0) throw Error(Errc::io, "no images found in the inputs");
  if (!out_shard) {
    fs::create_directories(output, ec);
    if (ec) throw Error(Errc::io, "cannot create '" + output + "': " + ec.message());
  }

  BatchReport rep;
  const bool tty = isatty(fileno(stderr));
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto progress = [&](bool last) {
    if (!tty) return;
    const int64_t done = std::min(total, rep.ok + rep.failed);
    const double s = elapsed(), rate = s > 0 ? done / s : 0;
    const int width = 30, filled = int(width * done / std::max<int64_t>(1, total));
    std::fprintf(stderr, "\r[%s%s] %lld/%lld images  %.1f images/s  %lld failed  eta %.0f s \x1b[K",
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), (long long)done,
                 (long long)total, rate, (long long)rep.failed, rate > 0 ? (total - done) / rate : 0.0);
    if (last) std::fputc('\n', stderr);
    std::fflush(stderr);
  };
  auto failed = [&](const std::string& label, const std::string& what) {
    ++rep.failed;
    rep.failures.push_back({{"input", label}, {"error", what}});
    if (tty) std::fputs("\r\x1b[K", stderr);
    // The label is a file or tar member name: quoted safely (an ESC in a downloaded shard's
    // member name must not reach the terminal), as the error messages are.
    std::fprintf(stderr, "fovea: warning: skipped %s: %s\n", Error::printable(label).c_str(),
                 Error::printable(what).c_str());
  };
  // A producer thread reads and decodes the images in order into a short queue; this thread
  // runs `fn` and writes: decoding the next images overlaps the current one's work.
  struct Item {
    size_t source = 0;
    std::string label, key;
    std::optional<ImageU8> image;
    std::string error;  // decode failure, or an unreadable/corrupt shard (the rest of it)
    bool end = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> queue;
  bool stop = false;
  constexpr size_t kQueue = 2;
  auto push = [&](Item it) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return stop || queue.size() < kQueue; });
    if (stop) return false;
    queue.push_back(std::move(it));
    cv.notify_all();
    return true;
  };
  auto decode_into = [&](Item& it, std::span<const uint8_t> bytes, const std::string& path) {
    try {
      it.image = path.empty() ? decode_image(bytes, load, it.label) : load_image(path, load);
    } catch (const std::exception& e) {
      it.error = e.what();
    }
  };
  std::thread producer([&] {
    // Decoding ahead should use cycles the encoder leaves idle (its OpenMP threads sleep at
    // barriers), not take them: a third runnable thread on two busy cores preempts a team
    // member, and the whole team waits for it at the next barrier. At the lowest priority
    // (per thread on Linux) it still gets the cores whenever the main thread waits for it.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
    for (size_t si = 0; si < sources.size(); ++si) {
      const Source& s = sources[si];
      if (!s.shard) {
        Item it{si, s.path, stem(s.path), std::nullopt, {}, false};
        decode_into(it, {}, s.path);
        if (!push(std::move(it))) return;
        continue;
      }
      try {
        TarReader r(s.path);
        TarMember m;
        while (r.next(m, is_image_name)) {
          Item it{si, s.path + ":" + m.name, webdataset_key(m.name), std::nullopt, {}, false};
          // Its output member is named after it: a name that would leave the folder it is
          // extracted into (absolute, or a '..' component) is not passed on to the output shard.
          if (tar_name_escapes(m.name))
            it.error = "member name '" + m.name + "' leaves the shard's folder (absolute or '..'): not a WebDataset key";
          else
            decode_into(it, m.bytes, "");
          if (!push(std::move(it))) return;
        }
      } catch (const std::exception& e) {
        Item it{si, s.path, "", std::nullopt, {}, false};
        it.error = e.what();
        if (!push(std::move(it))) return;
      }
    }
    Item end;
    end.end = true;
    push(std::move(end));
  });
  auto pop = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !queue.empty(); });
    Item it = std::move(queue.front());
    queue.pop_front();
    cv.notify_all();
    return it;
  };

  std::unique_ptr<TarWriter> shard;  // the shard being written (per input shard, or the -o one)
  std::string shard_path;
  try {
    if (out_shard) {
      shard = std::make_unique<TarWriter>(output);
      shard_path = output;
    }
    for (;;) {
      Item it = pop();
      if (it.end) break;
      const Source& s = sources[it.source];
      if (!it.image) {
        failed(it.label, it.error);
        progress(false);
        continue;
      }
      std::optional<std::vector<uint8_t>> out;
      try {
        out = fn(std::move(*it.image), it.label);
        ++rep.ok;
      } catch (const Error& e) {
        if (e.code() == Errc::io) throw;  // writing is broken for every image: stop
        failed(it.label, e.what());
      } catch (const std::exception& e) {
        failed(it.label, e.what());
      }
      if (out) {
        if (!out_shard && !s.shard) {
          write_file_atomic(s.out, *out);
        } else {
          if (!out_shard && shard_path != s.out) {
            if (shard) shard->finish();
            shard = std::make_unique<TarWriter>(s.out);
            shard_path = s.out;
          }
          shard->add(it.key + ".safetensors", *out);
        }
      }
      if (rep.first_image_s == 0) rep.first_image_s = elapsed();
      progress(false);
    }
    if (shard) shard->finish();
  } catch (...) {
    {
      std::lock_guard lock(mu);
      stop = true;
      cv.notify_all();
    }
    producer.join();
    throw;
  }
  producer.join();
  rep.images = rep.ok + rep.failed;
  rep.elapsed_s = elapsed();
  progress(true);
  return rep;
}

}  // namespace fovea::cli
