// fovea/tar.hpp — reading WebDataset shards: .tar archives whose members are <key>.<field>.
//
//   fovea::TarReader shard("shard-000.tar");                 // Error(io) when it cannot be opened
//   fovea::TarMember m;
//   auto images = [](const std::string& name) { return name.ends_with(".jpg"); };
//   while (shard.next(m, images))                             // Error(corrupt_data) for a bad archive
//     std::printf("%s: %zu bytes\n", fovea::webdataset_key(m.name).c_str(), m.bytes.size());
//
// POSIX ustar, GNU long names and base-256 sizes, pax path records. The batch CLI (`fovea
// tokenize|encode SHARD.tar`) and the Python module's Dask runner (fovea.distributed) read shards
// with it; fuzz/fuzz_tar.cpp fuzzes it. No tar library is used (libarchive is not a dependency);
// the format is 512-byte headers, each followed by the member's bytes padded to 512.
//
// A shard is untrusted input: every size is checked against the bytes the archive has left
// before it is read, skipped or allocated, so a damaged or crafted header is one
// Error(corrupt_data), never a long read, a huge allocation or a seek that loops.
// Thread safety: one TarReader per thread; the free functions are safe anywhere.
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "fovea/error.hpp"

FOVEA_API_BEGIN
namespace fovea {

struct TarMember {
  std::string name;
  std::vector<uint8_t> bytes;
};

// An octal (or GNU base-256) number field; saturates at UINT64_MAX instead of wrapping.
uint64_t tar_number(const char* field, size_t n);

// WebDataset's key of a member: its name up to the first '.' of its file name
// ("samples/000001.jpg" -> "samples/000001").
std::string webdataset_key(const std::string& member);

// True for a member name that would leave the folder it is extracted into: absolute, or with a
// '..' component. Such a name is no WebDataset key.
bool tar_name_escapes(const std::string& member);

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

}  // namespace fovea
FOVEA_API_END
