// Whole-file reads and atomic writes: every output fovea writes goes through here.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "io/file_bytes.hpp"
#include "io/file_kind.hpp"

namespace fovea {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
  const io_detail::InputFile in(path);
  if (!in.ok()) throw Error(Errc::io, in.error());
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(in.size()));
  } catch (const std::bad_alloc&) {
    throw Error(Errc::out_of_memory, "cannot read '" + path + "': file too large for memory");
  }
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(in.fd(), bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error(Errc::io, "cannot read '" + path + "': " + (r == 0 ? "file shrank while reading" : errno_text()));
    got += static_cast<size_t>(r);
  }
  return bytes;
}

namespace {

bool head_is(std::span<const uint8_t> b, std::string_view magic, size_t at = 0) {
  return b.size() >= at + magic.size() && std::memcmp(b.data() + at, magic.data(), magic.size()) == 0;
}

}  // namespace

FileKind io_detail::identify_file(std::span<const uint8_t> b) {
  using namespace std::string_view_literals;
  using M = FileKind::Media;
  auto kind = [](M m, std::string d) { return FileKind{m, std::move(d)}; };
  if (head_is(b, "version https://git-lfs.github.com/spec/"))
    return kind(M::other, "a Git LFS pointer, not the file itself (run `git lfs pull` in the repository it came from, or "
                          "download the file)");
  if (head_is(b, "\x89PNG\r\n\x1a\n"sv)) return kind(M::image, "a PNG image");
  if (head_is(b, "\xFF\xD8\xFF"sv)) return kind(M::image, "a JPEG image");
  if (head_is(b, "GIF87a") || head_is(b, "GIF89a")) return kind(M::image, "a GIF image");
  if (head_is(b, "RIFF") && head_is(b, "WEBP", 8)) return kind(M::image, "a WebP image");
  if (head_is(b, "II*\0"sv) || head_is(b, "MM\0*"sv)) return kind(M::image, "a TIFF image");
  if (head_is(b, "ftyp", 4)) {
    if (head_is(b, "avif", 8) || head_is(b, "avis", 8)) return kind(M::image, "an AVIF image");
    if (head_is(b, "heic", 8) || head_is(b, "heix", 8) || head_is(b, "mif1", 8)) return kind(M::image, "a HEIF image");
    return kind(M::video, "an MP4 / MOV video");
  }
  if (head_is(b, "\x1A\x45\xDF\xA3"sv)) return kind(M::video, "a Matroska / WebM video");
  if (head_is(b, "RIFF") && head_is(b, "AVI ", 8)) return kind(M::video, "an AVI video");
  if (head_is(b, "OggS")) return kind(M::av, "an Ogg stream");
  if (head_is(b, "FLV\x01"sv)) return kind(M::video, "an FLV video");
  if (head_is(b, "ID3") || head_is(b, "fLaC") || (head_is(b, "RIFF") && head_is(b, "WAVE", 8)))
    return kind(M::audio, "an audio file");
  if (head_is(b, "YUV4MPEG2")) return kind(M::video, "a Y4M video");
  if (head_is(b, "GGUF")) return kind(M::other, "a GGUF file");
  if (head_is(b, "PK\x03\x04"sv)) return kind(M::other, "a ZIP archive");
  if (head_is(b, "\x1F\x8B"sv)) return kind(M::other, "a gzip-compressed file (decompress it first)");
  if (head_is(b, "\x28\xB5\x2F\xFD"sv)) return kind(M::other, "a zstd-compressed file (decompress it first)");
  if (head_is(b, "ustar", 257)) return kind(M::other, "a tar archive");
  if (head_is(b, "\x93NUMPY"sv)) return kind(M::other, "a NumPy .npy array");
  if (head_is(b, "\x89HDF\r\n\x1a\n"sv)) return kind(M::other, "an HDF5 file (Keras / TensorFlow .h5)");
  if (b.size() >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
    return kind(M::other, "a Python pickle (a legacy torch.save file)");
  if (b.size() >= 9 && b[8] == '{') {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
    if (n >= 2 && n < (uint64_t(1) << 32)) return kind(M::other, "a safetensors file");
  }
  const size_t n = std::min<size_t>(b.size(), 64);
  bool text = n >= 2;
  for (size_t i = 0; i < n && text; ++i) text = std::isprint(b[i]) || b[i] == '\n' || b[i] == '\r' || b[i] == '\t';
  if (!text) return {};
  size_t first = 0;
  while (first < n && std::isspace(b[first])) ++first;
  if (first < n && (b[first] == '{' || b[first] == '[')) return kind(M::other, "JSON text");
  if (first < n && b[first] == '<') return kind(M::other, "HTML or XML text (a web page saved instead of the file?)");
  return kind(M::other, "text");
}

std::string io_detail::leading_bytes_hex(std::span<const uint8_t> head) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < head.size() && i < 8; ++i) {
    if (i) hex += ' ';
    hex += kDigits[head[i] >> 4];
    hex += kDigits[head[i] & 15];
  }
  return hex;
}

FileKind io_detail::identify_file(const std::string& path) {
  // Regular files only: a FIFO would block the open (no writer) or lose the bytes read here.
  const io_detail::InputFile in(path);
  if (!in.ok()) return {};
  uint8_t head[512];
  const ssize_t got = ::read(in.fd(), head, sizeof head);
  return got > 0 ? identify_file(std::span<const uint8_t>(head, size_t(got))) : FileKind{};
}

// The deprecated public names (fovea/files.hpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
FileKind identify_file(std::span<const uint8_t> head) { return io_detail::identify_file(head); }
FileKind identify_file(const std::string& path) { return io_detail::identify_file(path); }
std::string leading_bytes_hex(std::span<const uint8_t> head) { return io_detail::leading_bytes_hex(head); }
#pragma GCC diagnostic pop

namespace {

// Writes all of `bytes` to fd; false with errno set on failure.
bool write_all(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    done += static_cast<size_t>(w);
  }
  return true;
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Makes the rename durable too (best effort: some filesystems refuse fsync on folders).
void sync_folder(const std::string& folder) {
  const int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: the descriptor itself, so that a
// shell's `>> log` appends and `| next` streams, as with any Unix tool.
int fd_alias(const std::string& p) {
  if (p == "/dev/stdout") return 1;
  if (p == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (!starts_with(p, prefix)) continue;
    const std::string n = p.substr(std::strlen(prefix));
    if (n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoi(n);
  }
  return -1;
}

}  // namespace

// Where the bytes go. A path that does not exist yet, or names a regular file, is replaced
// atomically; through a symbolic link, the file it points at is (the link stays a link). A
// device, a FIFO or a socket (`-o /dev/null`, `-o /dev/stdout | ...`, a named pipe) cannot be
// replaced: it is written in place, as `cat > /dev/null` would. Renaming over it was what an
// atomic write did before, and as root that turned /dev/full into a regular file.
AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), shown_(path_) {
  if (path_.empty()) throw Error(Errc::invalid_argument, "output path is empty");
  if (const int alias = fd_alias(path_); alias >= 0) {
    direct_ = true;
    fd_ = ::fcntl(alias, F_DUPFD_CLOEXEC, 0);
    if (fd_ < 0) throw fail(errno_text());
    return;
  }
  struct stat link {};
  if (::lstat(path_.c_str(), &link) == 0) {
    struct stat target {};
    const bool resolves = ::stat(path_.c_str(), &target) == 0;
    if (resolves && S_ISDIR(target.st_mode)) throw fail("it is a folder");
    if (resolves && S_ISLNK(link.st_mode)) {
      // Resolve the link: a regular file is replaced where it lies; anything else (a link to a
      // device, or into /proc) is written in place.
      char* real = ::realpath(path_.c_str(), nullptr);
      const std::string resolved = real ? real : "";
      std::free(real);
      if (!resolved.empty() && S_ISREG(target.st_mode) && !starts_with(resolved, "/proc/"))
        path_ = resolved;
      else
        direct_ = true;
    } else if (resolves && !S_ISREG(target.st_mode)) {
      direct_ = true;
    }
  }
  if (direct_) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw fail(errno_text());
    return;
  }
  // Linux: the bytes go to an unnamed file in the target's folder (O_TMPFILE), which is given a
  // name only once complete and flushed, just before the rename, so a process killed while
  // writing (SIGKILL, OOM killer) leaves no half-written temporary file behind either. Where
  // O_TMPFILE or /proc is missing: a named `path.tmp-NNNNNN`, removed on failure.
  // The unnamed file is named through /proc/self/fd at commit: without /proc, a named one.
  if (::access("/proc/self/fd", X_OK) == 0) {
    fd_ = ::open(folder_of(path_).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd_ >= 0) return;
  }
  std::random_device rd;
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {  // retry on a name collision
    tmp_ = path_ + ".tmp-" + std::to_string(rd() % 1000000);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const std::string why = errno_text();
    tmp_.clear();  // not ours
    throw fail(why);
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());  // never committed: no litter
}

Error AtomicFile::fail(const std::string& why) const { return Error(Errc::io, "cannot write '" + shown_ + "': " + why); }

void AtomicFile::write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) throw Error(Errc::invalid_argument, "AtomicFile: write after commit");
  if (!write_all(fd_, bytes)) throw fail(errno_text());
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error(Errc::invalid_argument, "AtomicFile: committed twice");
  if (direct_) {  // a device or a pipe: nothing to rename
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw fail(errno_text());
    return;
  }
  // Data on disk before the name points at it: a crash leaves the old file or the new one.
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) throw fail(errno_text());
  if (tmp_.empty()) {  // unnamed: name it now
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    std::random_device rd;
    bool linked = false;
    for (int attempt = 0; attempt < 16 && !linked; ++attempt) {
      tmp_ = path_ + ".tmp-" + std::to_string(rd() % 1000000);
      linked = ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp_.c_str(), AT_SYMLINK_FOLLOW) == 0;
      if (!linked && errno != EEXIST) break;
    }
    if (!linked) {
      const std::string why = errno_text();
      tmp_.clear();
      throw fail("cannot name the finished file (" + why + ")");
    }
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw fail(errno_text());
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) throw fail(errno_text());
  tmp_.clear();  // renamed: nothing to remove
  sync_folder(folder_of(path_));
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace fovea
