// fovea/error.hpp — the one exception type that crosses the public API.
//
//   try { fovea::ImageU8 img = fovea::load_image("x.png"); }
//   catch (const fovea::Error& e) { std::fprintf(stderr, "%s\n", e.what()); /* e.code(): which kind */ }
//
// Recoverable failures (bad files, bad arguments, limits, missing device features) throw
// fovea::Error with a message written for the person at the terminal: one line, naming the
// input and what is wrong with it. Broken invariants inside the library assert instead.
// Messages quote what a file says (a key, a name, a value), so the constructor makes them safe
// to print: control characters other than '\n' (a NUL, an ESC, C1 controls) and bytes that are
// not UTF-8 (a file name in a legacy encoding) become \xNN, and a message over 4096 bytes is
// cut at a character boundary with "... (N more bytes)". A message is always valid UTF-8.
//
// Thread safety: an Error is an immutable value; to_string() is pure.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace fovea {

enum class Errc {
  invalid_argument,  // a parameter or option out of its domain
  io,                // cannot open, read, write or rename a file
  corrupt_data,      // a file that is truncated, malformed or inconsistent
  unsupported,       // a valid input fovea does not handle (format, dtype, architecture)
  limit_exceeded,    // an input larger than a configured limit (pixels, header size, ...)
  out_of_memory,     // an allocation the system refused
  device,            // a compute device failed or lacks a required feature
  internal,          // a bug: an invariant fovea should have kept
};

std::string_view to_string(Errc code);

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message) : std::runtime_error(printable(message)), code_(code) {}
  Errc code() const noexcept { return code_; }

  // The message as the constructor stores it (see above); pure.
  static std::string printable(std::string_view message);

 private:
  Errc code_;
};

// Error(invalid_argument, message): the error of a bad argument, which most checks throw.
inline Error invalid_argument(const std::string& message) { return Error(Errc::invalid_argument, message); }

}  // namespace fovea
