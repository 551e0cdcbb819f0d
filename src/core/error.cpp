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
  auto byte = [&m](size_t i) { return static_cast<unsigned char>(m[i]); };
  auto is_control = [](unsigned char c) { return (c < 0x20 && c != '\n') || c == 0x7f; };
  // Length of the well-formed UTF-8 sequence at i (Unicode's table 3-7: no overlong forms, no
  // surrogates, nothing above U+10FFFF), 0 where there is none: a stray byte, a file name in a
  // legacy encoding, a cut sequence. Such bytes are escaped, so a message is always valid UTF-8
  // (Python decodes exceptions' messages as UTF-8; JSON holds nothing else).
  auto utf8_len = [&](size_t i) -> size_t {
    const unsigned c = byte(i);
    if (c < 0x80) return 1;
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : lo, hi = c == 0xed ? 0x9f : hi;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : lo, hi = c == 0xf4 ? 0x8f : hi;
    else return 0;
    if (i + n > m.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
    for (size_t k = 2; k < n; ++k)
      if ((byte(i + k) & 0xc0) != 0x80) return 0;
    return n;
  };
  // A C1 control (U+0080..U+009F: CSI, OSC...) is the two bytes 0xc2 0x80..0x9f.
  auto is_c1 = [&](size_t i, size_t n) { return n == 2 && byte(i) == 0xc2 && byte(i + 1) < 0xa0; };
  auto escape = [&](std::string& out, unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  // The common case, a plain message that fits, is returned as it is.
  bool clean = m.size() <= kMaxBytes;
  for (size_t i = 0; clean && i < m.size();) {
    const size_t n = utf8_len(i);
    clean = n > 0 && !is_control(byte(i)) && !is_c1(i, n);
    i += n;
  }
  if (clean) return std::string(m);

  std::string out;
  out.reserve(std::min(m.size(), kMaxBytes) + 32);
  size_t i = 0;
  while (i < m.size() && out.size() < kMaxBytes) {
    const size_t n = utf8_len(i);
    if (n == 0 || is_control(byte(i))) {
      if (out.size() + 4 > kMaxBytes) break;
      escape(out, byte(i));
      i += 1;
    } else if (is_c1(i, n)) {
      if (out.size() + 4 > kMaxBytes) break;
      escape(out, byte(i + 1));
      i += 2;
    } else {
      if (out.size() + n > kMaxBytes) break;  // never cut a character
      out.append(m.substr(i, n));
      i += n;
    }
  }
  if (i < m.size()) out += "... (" + std::to_string(m.size() - i) + " more bytes)";
  return out;
}

}  // namespace fovea
