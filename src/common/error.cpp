#include "fovea/error.hpp"

#include <algorithm>

namespace fovea {

std::string_view to_string(Errc code) {
  switch (code) {
    case Errc::invalid_argument: return "invalid argument";
    case Errc::io: return "i/o error";
    case Errc::corrupt_data: return "corrupt data";
    case Errc::unsupported: return "unsupported";
    case Errc::limit_exceeded: return "limit exceeded";
    case Errc::out_of_memory: return "out of memory";
    case Errc::device: return "device error";
    case Errc::internal: return "internal error";
  }
  return "unknown error";
}

std::string Error::printable(std::string_view m) {
  constexpr size_t kMaxBytes = 4096;
  static constexpr char kHex[] = "0123456789abcdef";
  auto is_control = [](unsigned char c) { return (c < 0x20 && c != '\n') || c == 0x7f; };
  // A C1 control (U+0080..U+009F: CSI, OSC...) is the two bytes 0xc2 0x80..0x9f.
  auto is_c1_at = [&m](size_t i) {
    return static_cast<unsigned char>(m[i]) == 0xc2 && i + 1 < m.size() && (static_cast<unsigned char>(m[i + 1]) & 0xe0) == 0x80;
  };
  auto escape = [&](std::string& out, unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  // The common case, a plain message that fits, is returned as it is.
  bool clean = m.size() <= kMaxBytes;
  for (size_t i = 0; clean && i < m.size(); ++i) {
    clean = !is_control(static_cast<unsigned char>(m[i])) && !is_c1_at(i);
  }
  if (clean) return std::string(m);

  std::string out;
  out.reserve(std::min(m.size(), kMaxBytes) + 32);
  size_t i = 0;
  for (; i < m.size() && out.size() < kMaxBytes; ++i) {
    const auto c = static_cast<unsigned char>(m[i]);
    if (is_control(c)) {
      escape(out, c);
    } else if (is_c1_at(i)) {
      escape(out, static_cast<unsigned char>(m[++i]));
    } else {
      // Never cut a UTF-8 sequence: a lead byte goes with its continuation bytes.
      size_t n = 1;
      if (c >= 0xc0)
        while (i + n < m.size() && n < 4 && (static_cast<unsigned char>(m[i + n]) & 0xc0) == 0x80) ++n;
      if (out.size() + n > kMaxBytes) break;
      out.append(m.substr(i, n));
      i += n - 1;
    }
  }
  if (i < m.size()) out += "... (" + std::to_string(m.size() - i) + " more bytes)";
  return out;
}

}  // namespace fovea
