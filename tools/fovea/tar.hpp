// Reading WebDataset-style .tar shards (POSIX ustar, GNU long names and base-256 sizes, pax
// path records): the batch CLI's input parser, fuzzed by fuzz/fuzz_tar.cpp. No tar library is
// packaged here (libarchive-dev is not installed); the format is 512-byte headers, each
// followed by the member's bytes padded to 512.
//
// A shard is untrusted input: every size is checked against the bytes the archive has left
// before it is read, skipped or allocated, so a damaged or crafted header is one
// Error(corrupt_data), never a long read, a huge allocation or a seek that loops.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "fovea/error.hpp"

namespace fovea::cli {

struct TarMember {
  std::string name;
  std::vector<uint8_t> bytes;
};

// An octal (or GNU base-256) number field; saturates at UINT64_MAX instead of wrapping.
uint64_t tar_number(const char* field, size_t n);

class TarReader {
 public:
  // Error(io) when the file cannot be opened.
  explicit TarReader(const std::string& path);
  // Reads `f` (owned, closed by the destructor: an fmemopen buffer, say); `name` for messages.
  TarReader(FILE* f, std::string name);
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  // The next regular member whose name `want` accepts (its bytes read unless `read_bytes` is
  // false; others skipped). False at the end. Error(corrupt_data) for a malformed archive,
  // Error(limit_exceeded) for a member over 4 GiB.
  bool next(TarMember& out, const std::function<bool(const std::string&)>& want, bool read_bytes = true);

 private:
  Error corrupt(const std::string& what) const;
  void skip(uint64_t bytes, const char* what);
  std::string path_;
  FILE* f_ = nullptr;
  uint64_t size_ = 0;  // the archive's bytes
  uint64_t pos_ = 0;   // the next byte read
};

}  // namespace fovea::cli
