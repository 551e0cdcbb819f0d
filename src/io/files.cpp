// Whole-file reads and atomic writes: every output fovea writes goes through here.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "fovea/error.hpp"
#include "fovea/files.hpp"

namespace fovea {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(Errc::io, "cannot open '" + path + "': " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file";
    // (fstat failing leaves st zeroed, which reads as "not a regular file": close enough.)
    ::close(fd);
    throw Error(Errc::io, "cannot read '" + path + "': " + why);
  }
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(st.st_size));
  } catch (const std::bad_alloc&) {
    ::close(fd);
    throw Error(Errc::out_of_memory, "cannot read '" + path + "': file too large for memory");
  }
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string why = r == 0 ? "file shrank while reading" : errno_text();
      ::close(fd);
      throw Error(Errc::io, "cannot read '" + path + "': " + why);
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return bytes;
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  if (path.empty()) throw Error(Errc::invalid_argument, "output path is empty");
  std::random_device rd;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {  // retry on a name collision
    tmp = path + ".tmp-" + std::to_string(rd() % 1000000);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw Error(Errc::io, "cannot write '" + path + "': " + errno_text());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(Errc::io, "cannot write '" + path + "': " + why);
    }
    done += static_cast<size_t>(w);
  }
  // Data on disk before the name points at it: a crash leaves the old file or the new one.
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const std::string why = errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(Errc::io, "cannot write '" + path + "': " + why);
  }
  if (::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error(Errc::io, "cannot write '" + path + "': " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error(Errc::io, "cannot write '" + path + "': " + why);
  }
}

}  // namespace fovea
