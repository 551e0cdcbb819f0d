// fovea/files.hpp — whole-file reads and atomic writes: every file fovea writes goes through here.
//
//   std::vector<uint8_t> bytes = fovea::read_file("in.bin");       // Error(io) when unreadable
//   fovea::write_file_atomic("out.bin", bytes);                     // temp file + rename
//   fovea::AtomicFile out("big.bin");                               // the same, piece by piece
//   out.write(bytes);
//   out.commit();                                                   // flush, then rename
//
// A reader never sees a half-written file, and a failed write leaves no file behind: bytes go
// to an unnamed file in the same folder (O_TMPFILE; `path.tmp-XXXXXX` where the system has no
// O_TMPFILE or /proc), are flushed (fsync), named `path.tmp-XXXXXX` and renamed over `path`. A
// process killed at any point leaves the old file or the complete new one, and no partial
// temporary file. A symbolic link is followed (the file it names is replaced, the link stays);
// a device, FIFO or socket (`/dev/null`, `/dev/stdout`, a named pipe) is written in place,
// since it cannot be replaced; a folder is an error.
// Thread safety: all of it is safe to use from any thread (distinct paths; one AtomicFile per thread).
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fovea/error.hpp"

FOVEA_API_BEGIN
namespace fovea {

// Writes `bytes` to `path` atomically (temp file in the same folder + rename).
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
std::vector<uint8_t> read_file(const std::string& path);

// What a file's first bytes say it is, for errors that should name the mistake.
struct FileKind {
  // The kind of content, for callers that decide by it (a video given as an image gets a hint
  // to use `fovea video`); av: a container that may hold video or only audio (Ogg).
  enum class Media { unknown, image, video, audio, av, other };
  Media media = Media::unknown;
  // "a Git LFS pointer, not the file itself (...)", "a PNG image", "a Matroska / WebM video",
  // "JSON text"; empty when the bytes say nothing fovea recognises (media unknown).
  std::string description;
  bool known() const { return !description.empty(); }
};
// Deprecated: internal functions, removed from the API in the next release. `head`: a file's
// first bytes (up to 512 are read); the path form reads them (unknown when it cannot).
[[deprecated("internal to fovea")]] FileKind identify_file(std::span<const uint8_t> head);
[[deprecated("internal to fovea")]] FileKind identify_file(const std::string& path);
[[deprecated("internal to fovea")]] std::string leading_bytes_hex(std::span<const uint8_t> head);

// An output written piece by piece (a stream of frames), committed atomically. Destroyed
// without commit() (an exception on the way): `path` is untouched and nothing is left behind.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // Error(io) when `path`'s folder is not writable
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(std::span<const uint8_t> bytes);  // Error(io), e.g. a full disk
  void commit();                                // flush, name, rename over `path`; Error(io)

 private:
  Error fail(const std::string& why) const;
  std::string path_, shown_, tmp_;  // path_: what is replaced (a link resolved); shown_: the
                                    // caller's path, for messages; tmp_: the temporary file's name
  int fd_ = -1;
  bool direct_ = false;  // a device, FIFO or socket: written in place, not replaced
};

}  // namespace fovea
FOVEA_API_END
