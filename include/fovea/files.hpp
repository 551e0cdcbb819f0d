// fovea/files.hpp — whole-file reads and atomic writes: every file fovea writes goes through here.
//
//   std::vector<uint8_t> bytes = fovea::read_file("in.bin");       // Error(io) when unreadable
//   fovea::write_file_atomic("out.bin", bytes);                     // temp file + rename
//
// A reader never sees a half-written file, and a failed write leaves no file behind: bytes go
// to `path.tmp-XXXXXX` in the same folder, are flushed (fsync), then renamed over `path`.
// Thread safety: both functions are safe to call from any thread (distinct paths).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fovea {

// Writes `bytes` to `path` atomically (temp file in the same folder + rename).
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
std::vector<uint8_t> read_file(const std::string& path);

}  // namespace fovea
