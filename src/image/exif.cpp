// EXIF orientation: the one EXIF tag that changes what the pixels mean.
//
// The APP1 payload is untrusted: every offset is checked against the payload before it is
// read, and anything unexpected means "no orientation" rather than an error, as viewers do.
#include <cstring>
#include <optional>

#include "image/codecs.hpp"

namespace fovea::image_detail {

namespace {

constexpr uint16_t kOrientationTag = 0x0112;
constexpr uint16_t kTypeShort = 3;
constexpr uint16_t kTypeLong = 4;  // Orientation: not what the spec says, but some writers use it

// A bounds-checked view of the TIFF structure in either byte order.
class TiffReader {
 public:
  TiffReader(std::span<const uint8_t> tiff, bool big_endian) : tiff_(tiff), big_endian_(big_endian) {}

  bool u16(uint64_t offset, uint16_t* out) const {
    if (offset > tiff_.size() || tiff_.size() - offset < 2) return false;
    const uint8_t* p = tiff_.data() + offset;
    *out = big_endian_ ? uint16_t(p[0] << 8 | p[1]) : uint16_t(p[1] << 8 | p[0]);
    return true;
  }
  bool u32(uint64_t offset, uint32_t* out) const {
    if (offset > tiff_.size() || tiff_.size() - offset < 4) return false;
    const uint8_t* p = tiff_.data() + offset;
    *out = big_endian_ ? uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]
                       : uint32_t(p[3]) << 24 | uint32_t(p[2]) << 16 | uint32_t(p[1]) << 8 | p[0];
    return true;
  }

 private:
  std::span<const uint8_t> tiff_;
  bool big_endian_;
};

}  // namespace

int exif_orientation(std::span<const uint8_t> app1) {
  // "Exif" NUL pad: the second NUL is sometimes 0xFF in the wild, so only the first five count.
  if (app1.size() < 6 || std::memcmp(app1.data(), "Exif\0", 5) != 0) return 0;
  return tiff_orientation(app1.subspan(6));
}

std::optional<uint32_t> tiff_ifd0_value(std::span<const uint8_t> tiff, uint16_t wanted, bool first_of_several) {
  if (tiff.size() < 8) return std::nullopt;
  bool big_endian;
  if (tiff[0] == 'I' && tiff[1] == 'I') big_endian = false;
  else if (tiff[0] == 'M' && tiff[1] == 'M') big_endian = true;
  else return std::nullopt;
  const TiffReader r(tiff, big_endian);
  uint16_t magic = 0;
  uint32_t ifd0 = 0;
  if (!r.u16(2, &magic) || magic != 42 || !r.u32(4, &ifd0)) return std::nullopt;
  uint16_t count = 0;
  if (!r.u16(ifd0, &count)) return std::nullopt;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t entry = uint64_t(ifd0) + 2 + 12 * uint64_t(i);
    uint16_t tag = 0, type = 0;
    uint32_t n = 0;
    if (!r.u16(entry, &tag) || !r.u16(entry + 2, &type) || !r.u32(entry + 4, &n)) return std::nullopt;
    if (tag != wanted) continue;
    if (n == 0 || (n != 1 && !first_of_several)) return std::nullopt;
    // Values that fit in the entry's four bytes lie there; longer arrays lie at the offset it holds.
    uint64_t at = entry + 8;
    const bool inline_values = type == kTypeShort ? n <= 2 : n <= 1;
    uint32_t offset = 0;
    if (!inline_values) {
      if (!r.u32(entry + 8, &offset)) return std::nullopt;
      at = offset;
    }
    if (type == kTypeShort) {
      uint16_t v16 = 0;
      if (!r.u16(at, &v16)) return std::nullopt;
      return v16;
    }
    uint32_t v32 = 0;
    if (type == kTypeLong && r.u32(at, &v32)) return v32;
    return std::nullopt;
  }
  return std::nullopt;
}

int tiff_orientation(std::span<const uint8_t> tiff) {
  // Orientation lives in IFD0 itself (not in the Exif sub-IFD), so one directory is enough.
  const std::optional<uint32_t> v = tiff_ifd0_value(tiff, kOrientationTag);
  return v && *v >= 1 && *v <= 8 ? int(*v) : 0;
}

// Stored (x, y) in a W×H image goes to displayed (dx, dy), per the EXIF 2.3 definitions of
// "0th row" / "0th column":
//   1 (x, y)            2 mirror horizontal (W-1-x, y)     3 rotate 180 (W-1-x, H-1-y)
//   4 mirror vertical (x, H-1-y)                           5 transpose (y, x)
//   6 rotate 90 CW (H-1-y, x)   7 transverse (H-1-y, W-1-x)   8 rotate 90 CCW (y, W-1-x)
RowPlacement place_row(int orientation, int stored_width, int stored_height, size_t stride, int y) {
  const ptrdiff_t s = ptrdiff_t(stride);
  const ptrdiff_t w1 = stored_width - 1, h1 = stored_height - 1;
  switch (orientation) {
    case 2: return {y * s + w1, -1};
    case 3: return {(h1 - y) * s + w1, -1};
    case 4: return {(h1 - y) * s, 1};
    case 5: return {y, s};
    case 6: return {h1 - y, s};
    case 7: return {w1 * s + (h1 - y), -s};
    case 8: return {w1 * s + y, -s};
    default: return {y * s, 1};
  }
}


}  // namespace fovea::image_detail
