// Private to fovea: what a file's first bytes say it is, for errors that name the mistake ("a
// Git LFS pointer, not the file itself", "an MP4 / MOV video" given as an image). Stages
// downstream of io include it as "io/file_kind.hpp"; it is not installed.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "fovea/files.hpp"  // FileKind

namespace fovea::io_detail {

// `head`: the first bytes (up to 512 are read).
FileKind identify_file(std::span<const uint8_t> head);
// The same for a file on disk (its first 512 bytes); unknown when it cannot be read.
FileKind identify_file(const std::string& path);
// "c9 a2 66 e8 3f d8 50 12": the first (up to) eight bytes in hex, for an error about a file of
// no kind identify_file knows.
std::string leading_bytes_hex(std::span<const uint8_t> head);

}  // namespace fovea::io_detail
