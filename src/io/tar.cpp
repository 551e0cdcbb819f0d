#include "fovea/tar.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace fovea {

uint64_t tar_number(const char* field, size_t n) {
  constexpr uint64_t kMax = UINT64_MAX;
  if (static_cast<unsigned char>(field[0]) & 0x80) {  // GNU base-256
    uint64_t v = static_cast<unsigned char>(field[0]) & 0x7F;
    for (size_t i = 1; i < n; ++i) {
      if (v > (kMax >> 8)) return kMax;
      v = (v << 8) | static_cast<unsigned char>(field[i]);
    }
    return v;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < n && (field[i] == ' ' || field[i] == '\0')) ++i;
  for (; i < n && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v > (kMax >> 3)) return kMax;
    v = v * 8 + uint64_t(field[i] - '0');
  }
  return v;
}

std::string webdataset_key(const std::string& member) {
  const size_t slash = member.rfind('/');
  const size_t dot = member.find('.', slash == std::string::npos ? 0 : slash + 1);
  return dot == std::string::npos ? member : member.substr(0, dot);
}

bool tar_name_escapes(const std::string& member) {
  if (!member.empty() && member[0] == '/') return true;
  for (size_t at = 0; at <= member.size();) {
    const size_t slash = std::min(member.find('/', at), member.size());
    if (member.compare(at, slash - at, "..") == 0) return true;
    at = slash + 1;
  }
  return false;
}

namespace {
FILE* open_or_throw(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(Errc::io, "cannot open '" + path + "': " + std::strerror(errno));
  return f;
}
}  // namespace

TarReader::TarReader(const std::string& path) : TarReader(open_or_throw(path), path) {}

TarReader::TarReader(FILE* f, std::string name) : path_(std::move(name)), f_(f) {
  if (!f_) throw Error(Errc::io, "cannot read '" + path_ + "'");
  const bool ok = ::fseeko(f_, 0, SEEK_END) == 0;
  const off_t end = ok ? ::ftello(f_) : -1;
  if (end < 0 || ::fseeko(f_, 0, SEEK_SET) != 0) {
    std::fclose(f_);
    throw Error(Errc::io, "cannot read '" + path_ + "': not a seekable file");
  }
  size_ = uint64_t(end);
}

TarReader::~TarReader() {
  if (f_) std::fclose(f_);
}

Error TarReader::corrupt(const std::string& what) const { return Error(Errc::corrupt_data, "'" + path_ + "': " + what); }

// Skips `bytes` that the caller checked are inside the archive.
void TarReader::skip(uint64_t bytes, const char* what) {
  if (::fseeko(f_, off_t(bytes), SEEK_CUR) != 0) throw corrupt(std::string("cannot skip ") + what);
  pos_ += bytes;
}

bool TarReader::next(TarMember& out, const std::function<bool(const std::string&)>& want, bool read_bytes) {
  std::string long_name;
  for (;;) {
    char h[512];
    const size_t got = std::fread(h, 1, 512, f_);
    pos_ += got;
    if (got == 0) return false;
    if (got != 512) throw corrupt("truncated header");
    if (std::all_of(h, h + 512, [](char c) { return c == 0; })) return false;  // end-of-archive block
    uint64_t sum = 0;
    for (int i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? uint64_t(' ') : uint64_t(static_cast<unsigned char>(h[i]));
    if (sum != tar_number(h + 148, 8)) throw corrupt("header checksum mismatch (not a tar file?)");
    const uint64_t size = tar_number(h + 124, 12);
    const char type = h[156];
    std::string name(h, strnlen(h, 100));
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345]) name = std::string(h + 345, strnlen(h + 345, 155)) + "/" + name;
    // Every member's bytes, padded to 512, must be in the archive: a size near 2^64 would
    // otherwise round to a small or negative seek (a header read again and again, forever).
    const uint64_t left = size_ - std::min(size_, pos_);
    if (size > left) {
      const std::string who = name.empty() ? std::string("a member") : "member '" + name + "'";
      throw corrupt(who + " claims " + std::to_string(size) + " bytes, but the archive has " + std::to_string(left) +
                    " left (truncated or damaged)");
    }
    const uint64_t padded = std::min(left, (size + 511) / 512 * 512);  // (the last member's padding may be cut)
    if (type == 'L' || type == 'x') {  // the next member's name (GNU) / its pax records
      if (size > (1u << 20)) throw corrupt("oversized long-name record");
      std::string data(padded, '\0');
      if (std::fread(data.data(), 1, padded, f_) != padded) throw corrupt("truncated record");
      pos_ += padded;
      data.resize(size);
      if (type == 'L') {
        long_name = data.c_str();
      } else {
        for (size_t at = 0; at < data.size();) {  // "LEN key=value\n"
          const size_t sp = data.find(' ', at);
          if (sp == std::string::npos) break;
          const size_t len = std::strtoull(data.c_str() + at, nullptr, 10);
          if (len == 0 || len > data.size() - at || sp >= at + len) break;
          const std::string rec = data.substr(sp + 1, at + len - sp - 2);
          if (rec.rfind("path=", 0) == 0) long_name = rec.substr(5);
          at += len;
        }
      }
      continue;
    }
    if (!long_name.empty()) name = std::exchange(long_name, std::string());
    const bool regular = type == '0' || type == '\0' || type == '7';
    if (!regular || !want(name)) {
      skip(padded, "a member");
      continue;
    }
    out.name = name;
    out.bytes.clear();
    if (!read_bytes) {
      skip(padded, "a member");
      return true;
    }
    if (size > (uint64_t(1) << 32)) throw Error(Errc::limit_exceeded, "'" + path_ + "': member '" + name + "' is over 4 GiB");
    out.bytes.resize(size);
    if (size && std::fread(out.bytes.data(), 1, size, f_) != size) throw corrupt("truncated member '" + name + "'");
    pos_ += size;
    if (padded > size) skip(padded - size, "a member's padding");
    return true;
  }
}

}  // namespace fovea
