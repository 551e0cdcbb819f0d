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
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below); regular
  // files ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(Errc::io, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(Errc::io, "cannot read '" + path + "': not a regular file");
  }
  FileBytes b;
  if (st.st_size > 0) {  // mmap of 0 bytes fails; an empty file is simply no bytes
    void* addr = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    ::close(fd);
    if (addr == MAP_FAILED) throw Error(Errc::io, "cannot map '" + path + "': " + std::strerror(e));
    b.addr_ = addr;
    b.mapped_ = size_t(st.st_size);
  } else {
    ::close(fd);
  }
  return b;
}

FileBytes FileBytes::copy(std::span<const uint8_t> bytes) {
  FileBytes b;
  b.owned_.assign(bytes.begin(), bytes.end());
  return b;
}

}  // namespace fovea::io_detail
