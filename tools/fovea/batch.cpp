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

// Checks -o for a batch; true when it names one output shard.
bool check_output(const std::string& output) {
  if (output.empty()) throw batch_error("batch mode needs -o DIR (one file per image) or -o OUT.tar (one shard)");
  if (ends_with(lower(output), ".safetensors"))
    throw batch_error("-o '" + output + "' is one file, but the inputs are a batch (several images, a directory or a .tar shard): "
              "use -o DIR or -o OUT.tar");
  const bool out_shard = is_tar(output);
  std::error_code ec;
  if (!out_shard && fs::exists(output, ec) && !fs::is_directory(output, ec))
    throw batch_error("-o '" + output + "' exists and is not a directory");
  return out_shard;
}

// Every input as sources: a directory's image files in name order, a shard with its image count,
// a file. Typos and empty folders are found here, before any work.
std::vector<Source> list_sources(const std::vector<std::string>& inputs) {
  std::error_code ec;
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
  return sources;
}

// Names each source's output; two sources that would write the same one are refused.
void assign_outputs(std::vector<Source>& sources, const std::string& output, bool out_shard) {
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
}

// ---- the run: a decoding thread ahead of the caller's, outputs written as they come ------------

using Clock = std::chrono::steady_clock;

// The report's counts and failures as they happen: each failure one warning on stderr, and on a
// terminal a progress bar.
class BatchProgress {
 public:
  BatchProgress(BatchReport& rep, int64_t total) : rep_(rep), total_(total), tty_(isatty(fileno(stderr))), t0_(Clock::now()) {}

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  void show(bool last) const {
    if (!tty_) return;
    const int64_t done = std::min(total_, rep_.ok + rep_.failed);
    const double s = elapsed(), rate = s > 0 ? done / s : 0;
    const int width = 30, filled = int(width * done / std::max<int64_t>(1, total_));
    std::fprintf(stderr, "\r[%s%s] %lld/%lld images  %.1f images/s  %lld failed  eta %.0f s \x1b[K",
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), (long long)done,
                 (long long)total_, rate, (long long)rep_.failed, rate > 0 ? (total_ - done) / rate : 0.0);
    if (last) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

  void failed(const std::string& label, const std::string& what) {
    ++rep_.failed;
    rep_.failures.push_back({{"input", label}, {"error", what}});
    if (tty_) std::fputs("\r\x1b[K", stderr);
    // The label is a file or tar member name: quoted safely (an ESC in a downloaded shard's
    // member name must not reach the terminal), as the error messages are.
    std::fprintf(stderr, "fovea: warning: skipped %s: %s\n", Error::printable(label).c_str(),
                 Error::printable(what).c_str());
  }

 private:
  BatchReport& rep_;
  const int64_t total_;
  const bool tty_;
  const Clock::time_point t0_;
};

// A producer thread reads and decodes the images in order into a short queue; the caller's
// thread pops them, runs `fn` and writes: decoding the next images overlaps the current one's
// work. Destroying it (on an error too) stops and joins the thread.
class BatchDecoder {
 public:
  struct Item {
    size_t source = 0;
    std::string label, key;
    std::optional<ImageU8> image;
    std::string error;  // decode failure, or an unreadable/corrupt shard (the rest of it)
    bool end = false;
  };

  BatchDecoder(const std::vector<Source>& sources, const LoadOptions& load)
      : sources_(sources), load_(load), producer_([this] { produce(); }) {}
  BatchDecoder(const BatchDecoder&) = delete;
  BatchDecoder& operator=(const BatchDecoder&) = delete;
  ~BatchDecoder() { join(); }

  // The next image, in order; the last item has `end` set.
  Item pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    Item it = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return it;
  }

  // Stops the producer where it is (it has finished when the end was popped) and waits for it.
  void join() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (producer_.joinable()) producer_.join();
  }

 private:
  static constexpr size_t kQueue = 2;

  bool push(Item it) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stop_ || queue_.size() < kQueue; });
    if (stop_) return false;
    queue_.push_back(std::move(it));
    cv_.notify_all();
    return true;
  }

  void decode_into(Item& it, std::span<const uint8_t> bytes, const std::string& path) const {
    try {
      it.image = path.empty() ? decode_image(bytes, load_, it.label) : load_image(path, load_);
    } catch (const std::exception& e) {
      it.error = e.what();
    }
  }

  void produce() {
    // Decoding ahead should use cycles the encoder leaves idle (its OpenMP threads sleep at
    // barriers), not take them: a third runnable thread on two busy cores preempts a team
    // member, and the whole team waits for it at the next barrier. At the lowest priority
    // (per thread on Linux) it still gets the cores whenever the main thread waits for it.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
    for (size_t si = 0; si < sources_.size(); ++si) {
      const Source& s = sources_[si];
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
  }

  const std::vector<Source>& sources_;
  const LoadOptions& load_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread producer_;  // last: it starts once the members above are ready
};

// Writes each output: a file of its own, or a member of the shard being written (one per input
// shard, or the -o one).
class BatchOutputs {
 public:
  BatchOutputs(const std::string& output, bool out_shard) : out_shard_(out_shard) {
    if (out_shard) {
      shard_ = std::make_unique<TarWriter>(output);
      shard_path_ = output;
    }
  }

  void write(const Source& s, const std::string& key, const std::vector<uint8_t>& bytes) {
    if (!out_shard_ && !s.shard) {
      write_file_atomic(s.out, bytes);
      return;
    }
    if (!out_shard_ && shard_path_ != s.out) {
      if (shard_) shard_->finish();
      shard_ = std::make_unique<TarWriter>(s.out);
      shard_path_ = s.out;
    }
    shard_->add(key + ".safetensors", bytes);
  }

  void finish() {
    if (shard_) shard_->finish();
  }

 private:
  const bool out_shard_;
  std::unique_ptr<TarWriter> shard_;  // the shard being written
  std::string shard_path_;
};

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
  const bool out_shard = check_output(output);
  // Plan every source before any work: typos, empty folders and colliding outputs cost nothing.
  std::vector<Source> sources = list_sources(inputs);
  assign_outputs(sources, output, out_shard);
  int64_t total = 0;
  for (const Source& s : sources) total += s.images;
  if (total == 0) throw Error(Errc::io, "no images found in the inputs");
  if (!out_shard) {
    std::error_code ec;
    fs::create_directories(output, ec);
    if (ec) throw Error(Errc::io, "cannot create '" + output + "': " + ec.message());
  }

  BatchReport rep;
  BatchProgress progress(rep, total);
  BatchDecoder decoder(sources, load);
  BatchOutputs outputs(output, out_shard);
  for (;;) {
    BatchDecoder::Item it = decoder.pop();
    if (it.end) break;
    if (!it.image) {
      progress.failed(it.label, it.error);
      progress.show(false);
      continue;
    }
    std::optional<std::vector<uint8_t>> out;
    try {
      out = fn(std::move(*it.image), it.label);
      ++rep.ok;
    } catch (const Error& e) {
      if (e.code() == Errc::io) throw;  // writing is broken for every image: stop
      progress.failed(it.label, e.what());
    } catch (const std::exception& e) {
      progress.failed(it.label, e.what());
    }
    if (out) outputs.write(sources[it.source], it.key, *out);
    if (rep.first_image_s == 0) rep.first_image_s = progress.elapsed();
    progress.show(false);
  }
  outputs.finish();
  decoder.join();
  rep.images = rep.ok + rep.failed;
  rep.elapsed_s = progress.elapsed();
  progress.show(true);
  return rep;
}

}  // namespace fovea::cli
