// The bytes a file reader parses: a whole file mapped read-only where it lies (checkpoints of
// hundreds of MB are read in place, never copied), or a copy of a caller's bytes (fuzzers,
// Python buffers). The safetensors and GGUF readers keep one for as long as their tensors are
// read, so a tensor's bytes stay valid while its file object lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fovea::io_detail {

// An input file opened read-only, regular files only, closed when it goes out of scope.
// O_NONBLOCK keeps the open of a FIFO without a writer from blocking (the FIFO is then refused;
// regular files ignore the flag); directories and devices are refused too.
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  // Why not ok(): "cannot open 'PATH': <reason>" or "cannot read 'PATH': is a directory" /
  // "...: not a regular file". Empty when ok().
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string error_;
};

class FileBytes {
 public:
  FileBytes() = default;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  FileBytes(FileBytes&& o) noexcept;
  FileBytes& operator=(FileBytes&& o) noexcept;
  ~FileBytes();

  // Maps `path` (MAP_PRIVATE, PROT_READ). An empty file gives no bytes. Throws Error(io) when
  // the path cannot be opened, is not a regular file, or cannot be mapped.
  static FileBytes map(const std::string& path);
  static FileBytes copy(std::span<const uint8_t> bytes);

  const uint8_t* data() const { return addr_ ? static_cast<const uint8_t*>(addr_) : owned_.data(); }
  uint64_t size() const { return addr_ ? mapped_ : owned_.size(); }

 private:
  void* addr_ = nullptr;
  size_t mapped_ = 0;
  std::vector<uint8_t> owned_;
};

}  // namespace fovea::io_detail
