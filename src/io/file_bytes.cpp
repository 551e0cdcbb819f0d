#include "io/file_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "fovea/error.hpp"

namespace fovea::io_detail {

InputFile::InputFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error_ = "cannot open '" + path + "': " + std::strerror(errno);
    return;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    // (fstat failing leaves st zeroed, which reads as "not a regular file": close enough.)
    error_ = "cannot read '" + path + "': " + (S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    ::close(fd);
    return;
  }
  fd_ = fd;
  size_ = uint64_t(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

FileBytes::FileBytes(FileBytes&& o) noexcept
    : addr_(std::exchange(o.addr_, nullptr)), mapped_(std::exchange(o.mapped_, 0)), owned_(std::move(o.owned_)) {}

FileBytes& FileBytes::operator=(FileBytes&& o) noexcept {
  if (this != &o) {
    if (addr_) ::munmap(addr_, mapped_);
    addr_ = std::exchange(o.addr_, nullptr);
    mapped_ = std::exchange(o.mapped_, 0);
    owned_ = std::move(o.owned_);
  }
  return *this;
}

FileBytes::~FileBytes() {
  if (addr_) ::munmap(addr_, mapped_);
}

FileBytes FileBytes::map(const std::string& path) {
  const InputFile in(path);
  if (!in.ok()) throw Error(Errc::io, in.error());
  FileBytes b;
  if (in.size() > 0) {  // mmap of 0 bytes fails; an empty file is simply no bytes
    void* addr = ::mmap(nullptr, size_t(in.size()), PROT_READ, MAP_PRIVATE, in.fd(), 0);
    if (addr == MAP_FAILED) throw Error(Errc::io, "cannot map '" + path + "': " + std::strerror(errno));
    b.addr_ = addr;
    b.mapped_ = size_t(in.size());
  }
  return b;
}

FileBytes FileBytes::copy(std::span<const uint8_t> bytes) {
  FileBytes b;
  b.owned_.assign(bytes.begin(), bytes.end());
  return b;
}

}  // namespace fovea::io_detail
