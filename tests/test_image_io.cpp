// Image file I/O: PNG and JPEG decoding and encoding, EXIF orientation, limits and errors.
//
// Inputs fovea's own encoders cannot produce (16-bit, palette, interlaced, progressive, CMYK,
// EXIF) are written here with libpng and libjpeg directly.
#include <fcntl.h>
#include <png.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/image.hpp"
#include "fovea/version_gen.hpp"
#include "image/codecs.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

namespace fs = std::filesystem;

// ---- writers for test inputs ----------------------------------------------------------------

struct PngSpec {
  PngSpec(int w, int h, int depth, int type, bool adam7 = false)
      : width(w), height(h), bit_depth(depth), color_type(type), interlace(adam7) {}
  int width, height;
  int bit_depth;
  int color_type;
  bool interlace;
  std::vector<png_color> palette;
  std::vector<uint8_t> trns;  // palette alpha entries
};

void png_append(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void png_no_flush(png_structp) {}

// `rows`: height rows of packed samples as PNG stores them (16-bit big-endian).
// Plain data only in this frame: libpng longjmps back here on error.
bool write_png_raw(const PngSpec* spec, const uint8_t* rows, size_t row_bytes,
                   std::vector<uint8_t>* out) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, out, png_append, png_no_flush);
  png_set_IHDR(png, info, png_uint_32(spec->width), png_uint_32(spec->height), spec->bit_depth,
               spec->color_type, spec->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!spec->palette.empty())
    png_set_PLTE(png, info, spec->palette.data(), int(spec->palette.size()));
  if (!spec->trns.empty())
    png_set_tRNS(png, info, spec->trns.data(), int(spec->trns.size()), nullptr);
  png_write_info(png, info);
  const int passes = spec->interlace ? png_set_interlace_handling(png) : 1;
  for (int pass = 0; pass < passes; ++pass)
    for (int y = 0; y < spec->height; ++y) png_write_row(png, rows + size_t(y) * row_bytes);
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return true;
}

std::vector<uint8_t> write_png(const PngSpec& spec, const std::vector<uint8_t>& rows) {
  std::vector<uint8_t> out;
  EXPECT_EQ(rows.size() % size_t(spec.height), 0u);
  EXPECT_TRUE(write_png_raw(&spec, rows.data(), rows.size() / size_t(spec.height), &out));
  return out;
}

struct JpegSpec {
  JpegSpec(int w, int h, int comps, J_COLOR_SPACE in, J_COLOR_SPACE jpeg = JCS_UNKNOWN, int q = 95)
      : width(w), height(h), components(comps), in_space(in), jpeg_space(jpeg), quality(q) {}
  int width, height;
  int components;
  J_COLOR_SPACE in_space;
  J_COLOR_SPACE jpeg_space;  // JCS_UNKNOWN: libjpeg's default for in_space
  int quality;
  bool progressive = false;
  const jpeg_scan_info* scans = nullptr;  // custom progression
  int num_scans = 0;
  std::vector<uint8_t> app1;  // written right after SOI/JFIF
};

struct TestJpegError {
  jpeg_error_mgr pub;
  jmp_buf jump;
};
void test_jpeg_error_exit(j_common_ptr cinfo) {
  (*cinfo->err->output_message)(cinfo);
  std::longjmp(reinterpret_cast<TestJpegError*>(cinfo->err)->jump, 1);
}

// `pixels`: interleaved samples. Plain data only in this frame (libjpeg longjmps here).
bool write_jpeg_raw(const JpegSpec* spec, const uint8_t* pixels, std::vector<uint8_t>* out) {
  jpeg_compress_struct cinfo;
  TestJpegError err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = test_jpeg_error_exit;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = JDIMENSION(spec->width);
  cinfo.image_height = JDIMENSION(spec->height);
  cinfo.input_components = spec->components;
  cinfo.in_color_space = spec->in_space;
  jpeg_set_defaults(&cinfo);
  if (spec->jpeg_space != JCS_UNKNOWN) jpeg_set_colorspace(&cinfo, spec->jpeg_space);
  jpeg_set_quality(&cinfo, spec->quality, TRUE);
  if (spec->progressive) jpeg_simple_progression(&cinfo);
  if (spec->scans) {
    cinfo.scan_info = spec->scans;
    cinfo.num_scans = spec->num_scans;
  }
  jpeg_start_compress(&cinfo, TRUE);
  if (!spec->app1.empty())
    jpeg_write_marker(&cinfo, JPEG_APP0 + 1, spec->app1.data(), unsigned(spec->app1.size()));
  const size_t row_bytes = size_t(spec->width) * spec->components;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels + cinfo.next_scanline * row_bytes);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  out->assign(buffer, buffer + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return true;
}

std::vector<uint8_t> write_jpeg(const JpegSpec& spec, const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> out;
  EXPECT_TRUE(write_jpeg_raw(&spec, pixels.data(), &out));
  return out;
}

std::vector<uint8_t> interleave(const ImageU8& img) {
  std::vector<uint8_t> out;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x)
      for (int c = 0; c < img.channels(); ++c) out.push_back(img.at(c, y, x));
  return out;
}

// EXIF APP1 payload holding IFD0 with a dummy tag and then Orientation.
std::vector<uint8_t> exif_block(int orientation, bool big_endian) {
  std::vector<uint8_t> b = {'E', 'x', 'i', 'f', 0, 0};
  const auto u16 = [&](uint32_t v) {
    if (big_endian) b.insert(b.end(), {uint8_t(v >> 8), uint8_t(v)});
    else b.insert(b.end(), {uint8_t(v), uint8_t(v >> 8)});
  };
  const auto u32 = [&](uint32_t v) {
    if (big_endian) b.insert(b.end(), {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)});
    else b.insert(b.end(), {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)});
  };
  b.insert(b.end(), big_endian ? std::initializer_list<uint8_t>{'M', 'M'} : std::initializer_list<uint8_t>{'I', 'I'});
  u16(42);
  u32(8);  // IFD0 right after the header
  u16(2);  // entries
  u16(0x010F);  // Make, ASCII, 4 bytes inline: "abc\0"
  u16(2);
  u32(4);
  b.insert(b.end(), {'a', 'b', 'c', 0});
  u16(0x0112);  // Orientation, SHORT, 1 value, left-justified in the 4-byte field
  u16(3);
  u32(1);
  u16(uint32_t(orientation));
  u16(0);
  u32(0);  // no next IFD
  return b;
}

// Runs `f`, expects a fovea::Error with `code` whose message mentions `name`.
void expect_error(const std::function<void()>& f, Errc code, const std::string& name,
                  const std::string& also = "") {
  try {
    f();
    ADD_FAILURE() << "no error thrown, expected " << to_string(code);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    if (!also.empty()) {
      EXPECT_NE(std::string(e.what()).find(also), std::string::npos) << e.what();
    }
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

void expect_equal(const ImageU8& a, const ImageU8& b) {
  ASSERT_EQ(a.width(), b.width());
  ASSERT_EQ(a.height(), b.height());
  ASSERT_EQ(a.channels(), b.channels());
  for (int c = 0; c < a.channels(); ++c)
    for (int y = 0; y < a.height(); ++y)
      for (int x = 0; x < a.width(); ++x)
        ASSERT_EQ(a.at(c, y, x), b.at(c, y, x)) << "c=" << c << " y=" << y << " x=" << x;
}

double mean_abs_diff(const ImageU8& a, const ImageU8& b) {
  double sum = 0;
  for (int c = 0; c < a.channels(); ++c)
    for (int y = 0; y < a.height(); ++y)
      for (int x = 0; x < a.width(); ++x) sum += std::abs(int(a.at(c, y, x)) - int(b.at(c, y, x)));
  return sum / double(a.pixels() * a.channels());
}

ImageU8 smooth_image(int w, int h, int channels) {
  ImageU8 img(w, h, channels);
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        img.at(c, y, x) = uint8_t(128 + 100 * std::sin(0.07 * x + 0.05 * y + c) * std::cos(0.04 * y));
  return img;
}

bool have_ffmpeg_stills() { return std::string(image_formats()).find("WebP") != std::string::npos; }

// Lossy WebP against Pillow (libwebp): mean 0.67, worst 8 levels on the fixture (2026-11-28).
constexpr double kLossyWebpMeanDiff = 1.0;
constexpr int kLossyWebpMaxDiff = 12;

std::vector<uint8_t> valid_png() { return encode_png(test::random_image(24, 16, 3, 7)); }
std::vector<uint8_t> valid_jpeg() { return encode_jpeg(smooth_image(40, 24, 3), 90); }

// ---- PNG ------------------------------------------------------------------------------------

TEST(ImageIoPng, RoundTripGrayAndRgbExact) {
  for (int channels : {1, 3}) {
    const ImageU8 src = test::random_image(37, 23, channels, 3);
    const std::vector<uint8_t> png = encode_png(src);
    const ImageU8 back = decode_image(png);
    expect_equal(back, src);
    const ImageF32 f = decode_image_f32(png);
    ASSERT_EQ(f.channels(), channels);
    EXPECT_EQ(f.at(channels - 1, 22, 36), src.at(channels - 1, 22, 36) / 255.0f);
  }
}

TEST(ImageIoPng, SaveAndLoadThroughAFile) {
  const std::string dir = test::temp_dir("ImageIoPng_file");
  const ImageU8 src = test::gradient_image(50, 30, 3);
  save_png(src, dir + "/a.png");
  expect_equal(load_image(dir + "/a.png"), src);
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename(), "a.png") << "temp file left behind";
  expect_error([&] { save_png(src, dir + "/missing/a.png"); }, Errc::io, dir + "/missing/a.png");
  EXPECT_THROW(encode_png(ImageU8()), Error);
}

TEST(ImageIoPng, SixteenBitRoundsToU8AndKeepsPrecisionInF32) {
  // Every 16-bit value once, in a 256x256 gray image.
  PngSpec spec{256, 256, 16, PNG_COLOR_TYPE_GRAY};
  std::vector<uint8_t> rows;
  for (uint32_t v = 0; v < 65536; ++v) rows.insert(rows.end(), {uint8_t(v >> 8), uint8_t(v)});
  const std::vector<uint8_t> png = write_png(spec, rows);
  const ImageU8 u8 = decode_image(png);
  const ImageF32 f32 = decode_image_f32(png);
  ASSERT_EQ(u8.channels(), 1);
  ASSERT_EQ(f32.channels(), 1);
  for (uint32_t v = 0; v < 65536; ++v) {
    const int y = int(v / 256), x = int(v % 256);
    ASSERT_EQ(u8.at(0, y, x), std::lround(v / 257.0)) << v;
    ASSERT_EQ(f32.at(0, y, x), float(v) / 65535.0f) << v;
  }
  // Distinct 16-bit neighbours stay distinct in f32 (not squashed to 8 bits first).
  EXPECT_NE(f32.at(0, 0, 1), f32.at(0, 0, 0));

  // RGBA 16-bit: alpha dropped, each channel rounded.
  PngSpec rgba{2, 1, 16, PNG_COLOR_TYPE_RGB_ALPHA};
  const std::vector<uint8_t> px = {0x30, 0x2D, 0xAF, 0x50, 0xFF, 0xFF, 0x00, 0x00,   // 12333 44880 65535 a=0
                                   0x00, 0x80, 0x00, 0x7F, 0x01, 0x01, 0x12, 0x34};  // 128 127 257
  const ImageU8 c8 = decode_image(write_png(rgba, px));
  const ImageF32 c32 = decode_image_f32(write_png(rgba, px));
  ASSERT_EQ(c8.channels(), 3);
  EXPECT_EQ(c8.at(0, 0, 0), 48);   // 12333 / 257 = 47.99
  EXPECT_EQ(c8.at(1, 0, 0), 175);  // 44880 / 257 = 174.63
  EXPECT_EQ(c8.at(2, 0, 0), 255);
  EXPECT_EQ(c8.at(0, 0, 1), 0);    // 128 / 257 = 0.498
  EXPECT_EQ(c8.at(1, 0, 1), 0);
  EXPECT_EQ(c8.at(2, 0, 1), 1);
  EXPECT_EQ(c32.at(1, 0, 0), 44880.0f / 65535.0f);
  EXPECT_EQ(c32.at(0, 0, 1), 128.0f / 65535.0f);
}

TEST(ImageIoPng, PaletteWithTransparencyExpandsToRgb) {
  const std::vector<png_color> palette = {{255, 0, 0}, {0, 200, 0}, {10, 20, 30}, {90, 90, 90}};
  for (int depth : {2, 8}) {
    PngSpec spec{5, 2, depth, PNG_COLOR_TYPE_PALETTE};
    spec.palette = palette;
    spec.trns = {0, 128};  // entry 0 fully transparent, entry 1 half: alpha is dropped anyway
    // indices: row 0 = 0 1 2 3 0, row 1 = 3 2 1 0 3
    std::vector<uint8_t> rows;
    if (depth == 8) {
      rows = {0, 1, 2, 3, 0, 3, 2, 1, 0, 3};
    } else {  // 2 bits per index, 5 pixels -> 2 bytes a row
      rows = {0b00011011, 0b00000000, 0b11100100, 0b11000000};
    }
    const ImageU8 img = decode_image(write_png(spec, rows));
    ASSERT_EQ(img.channels(), 3) << depth;
    ASSERT_EQ(img.width(), 5);
    const int idx[2][5] = {{0, 1, 2, 3, 0}, {3, 2, 1, 0, 3}};
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 5; ++x) {
        const png_color& p = palette[idx[y][x]];
        EXPECT_EQ(img.at(0, y, x), p.red) << depth << " " << x << "," << y;
        EXPECT_EQ(img.at(1, y, x), p.green);
        EXPECT_EQ(img.at(2, y, x), p.blue);
      }
  }
}

TEST(ImageIoPng, LowBitDepthGrayScalesToFullRange) {
  // 13 pixels: a width that does not fill the last byte.
  for (int depth : {1, 2, 4}) {
    const int levels = 1 << depth;
    PngSpec spec{13, 2, depth, PNG_COLOR_TYPE_GRAY};
    const size_t row_bytes = (13 * size_t(depth) + 7) / 8;
    std::vector<uint8_t> rows(row_bytes * 2, 0);
    std::vector<int> values;
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 13; ++x) {
        const int v = (x + 3 * y) % levels;
        values.push_back(v);
        const int bit = x * depth;
        rows[y * row_bytes + bit / 8] |= uint8_t(v << (8 - depth - bit % 8));
      }
    const ImageU8 img = decode_image(write_png(spec, rows));
    ASSERT_EQ(img.channels(), 1);
    ASSERT_EQ(img.width(), 13);
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 13; ++x)
        EXPECT_EQ(img.at(0, y, x), values[y * 13 + x] * 255 / (levels - 1)) << depth << " " << x;
  }
}

TEST(ImageIoPng, AlphaIsDropped) {
  PngSpec ga{3, 1, 8, PNG_COLOR_TYPE_GRAY_ALPHA};
  const ImageU8 g = decode_image(write_png(ga, {10, 0, 20, 128, 30, 255}));
  ASSERT_EQ(g.channels(), 1);
  EXPECT_EQ(g.at(0, 0, 0), 10);
  EXPECT_EQ(g.at(0, 0, 1), 20);
  EXPECT_EQ(g.at(0, 0, 2), 30);

  PngSpec rgba{2, 1, 8, PNG_COLOR_TYPE_RGB_ALPHA};
  const ImageU8 c = decode_image(write_png(rgba, {1, 2, 3, 0, 4, 5, 6, 77}));
  ASSERT_EQ(c.channels(), 3);
  EXPECT_EQ(c.at(0, 0, 0), 1);
  EXPECT_EQ(c.at(2, 0, 0), 3);
  EXPECT_EQ(c.at(0, 0, 1), 4);
  EXPECT_EQ(c.at(2, 0, 1), 6);
}

TEST(ImageIoPng, InterlacedMatchesSource) {
  const ImageU8 src = test::random_image(33, 19, 3, 11);
  PngSpec spec{33, 19, 8, PNG_COLOR_TYPE_RGB, true};
  const std::vector<uint8_t> png = write_png(spec, interleave(src));
  expect_equal(decode_image(png), src);

  // 16-bit gray, interlaced, f32 keeps the low byte.
  PngSpec gray16{9, 9, 16, PNG_COLOR_TYPE_GRAY, true};
  std::vector<uint8_t> rows;
  for (int i = 0; i < 81; ++i) rows.insert(rows.end(), {uint8_t(i), uint8_t(i * 3)});
  const ImageF32 f = decode_image_f32(write_png(gray16, rows));
  for (int i = 0; i < 81; ++i)
    ASSERT_EQ(f.at(0, i / 9, i % 9), float(i * 256 + (i * 3 & 255)) / 65535.0f) << i;
}

// ---- JPEG -----------------------------------------------------------------------------------

TEST(ImageIoJpeg, RoundTripWithinTolerance) {
  for (int channels : {1, 3}) {
    const ImageU8 src = smooth_image(64, 48, channels);
    const ImageU8 back = decode_image(encode_jpeg(src, 95));
    ASSERT_EQ(back.channels(), channels);
    ASSERT_EQ(back.width(), 64);
    ASSERT_EQ(back.height(), 48);
    EXPECT_LT(mean_abs_diff(back, src), 3.0) << channels;
    // Lower quality: smaller file, still the same picture.
    EXPECT_LT(encode_jpeg(src, 30).size(), encode_jpeg(src, 95).size());
    EXPECT_LT(mean_abs_diff(decode_image(encode_jpeg(src, 30)), src), 8.0);
  }
  const ImageF32 f = decode_image_f32(encode_jpeg(smooth_image(16, 16, 3), 95));
  const ImageU8 u = decode_image(encode_jpeg(smooth_image(16, 16, 3), 95));
  EXPECT_EQ(f.at(1, 5, 7), u.at(1, 5, 7) / 255.0f);
}

TEST(ImageIoJpeg, QualityOutsideRangeIsInvalidArgument) {
  const ImageU8 img = test::constant_image(8, 8, 3, 100);
  expect_error([&] { encode_jpeg(img, 0); }, Errc::invalid_argument, "quality");
  expect_error([&] { encode_jpeg(img, 101); }, Errc::invalid_argument, "quality");
  EXPECT_FALSE(encode_jpeg(img, 1).empty());
  EXPECT_FALSE(encode_jpeg(img, 100).empty());
  const std::string dir = test::temp_dir("ImageIoJpeg_quality");
  EXPECT_THROW(save_jpeg(img, dir + "/a.jpg", -5), Error);
  EXPECT_FALSE(fs::exists(dir + "/a.jpg"));
  save_jpeg(img, dir + "/a.jpg", 80);
  EXPECT_EQ(load_image(dir + "/a.jpg").at(2, 7, 7), 100);
}

TEST(ImageIoJpeg, GrayscaleStaysOneChannel) {
  const ImageU8 src = smooth_image(30, 20, 1);
  JpegSpec spec{30, 20, 1, JCS_GRAYSCALE};
  const ImageU8 img = decode_image(write_jpeg(spec, interleave(src)));
  ASSERT_EQ(img.channels(), 1);
  EXPECT_LT(mean_abs_diff(img, src), 2.0);
}

TEST(ImageIoJpeg, ProgressiveDecodes) {
  const ImageU8 src = smooth_image(61, 35, 3);
  JpegSpec spec{61, 35, 3, JCS_RGB};
  spec.progressive = true;
  const std::vector<uint8_t> jpg = write_jpeg(spec, interleave(src));
  // SOF2 marks a progressive frame: make sure this really is one.
  bool sof2 = false;
  for (size_t i = 0; i + 1 < jpg.size(); ++i) sof2 |= jpg[i] == 0xFF && jpg[i + 1] == 0xC2;
  ASSERT_TRUE(sof2);
  const ImageU8 img = decode_image(jpg);
  ASSERT_EQ(img.channels(), 3);
  ASSERT_EQ(img.width(), 61);
  EXPECT_LT(mean_abs_diff(img, src), 3.0);
}

TEST(ImageIoJpeg, TooManyProgressiveScansIsALimit) {
  // A valid progression with ~700 scans: every AC coefficient its own band, refined bit by bit.
  std::vector<jpeg_scan_info> scans;
  scans.push_back({1, {0}, 0, 0, 0, 10});
  for (int al = 9; al >= 0; --al) scans.push_back({1, {0}, 0, 0, al + 1, al});
  for (int k = 1; k < 64; ++k) {
    scans.push_back({1, {0}, k, k, 0, 10});
    for (int al = 9; al >= 0; --al) scans.push_back({1, {0}, k, k, al + 1, al});
  }
  ASSERT_GT(scans.size(), 600u);
  const ImageU8 src = smooth_image(16, 8, 1);
  JpegSpec spec{16, 8, 1, JCS_GRAYSCALE};
  spec.scans = scans.data();
  spec.num_scans = int(scans.size());
  const std::vector<uint8_t> jpg = write_jpeg(spec, interleave(src));
  expect_error([&] { decode_image(jpg, {}, "scans.jpg"); }, Errc::limit_exceeded, "scans.jpg", "scans");
}

TEST(ImageIoJpeg, CmykAndYcckConvertToRgb) {
  // Adobe convention: stored values are inverted (255 = no ink). libjpeg writes the Adobe marker.
  struct Case {
    uint8_t r, g, b;
    double ink_k;
  };
  const Case cases[] = {{200, 100, 50, 0.0}, {255, 255, 255, 0.5}, {30, 220, 128, 0.25}};
  for (J_COLOR_SPACE space : {JCS_CMYK, JCS_YCCK}) {
    std::vector<uint8_t> cmyk;
    for (int i = 0; i < 16 * 16; ++i) {
      const Case& c = cases[(i / 16) * 3 / 16];  // rows 0-5, 6-10, 11-15
      const uint8_t k_inv = uint8_t(std::lround(255 * (1 - c.ink_k)));
      cmyk.insert(cmyk.end(), {c.r, c.g, c.b, k_inv});
    }
    JpegSpec spec{16, 16, 4, JCS_CMYK, space, 98};
    const ImageU8 img = decode_image(write_jpeg(spec, cmyk));
    ASSERT_EQ(img.channels(), 3);
    const int rows[] = {2, 8, 14};
    for (int i = 0; i < 3; ++i) {
      const Case& c = cases[i];
      const double k = 1 - c.ink_k;
      EXPECT_NEAR(img.at(0, rows[i], 8), c.r * k, 4) << int(space) << " case " << i;
      EXPECT_NEAR(img.at(1, rows[i], 8), c.g * k, 4) << int(space) << " case " << i;
      EXPECT_NEAR(img.at(2, rows[i], 8), c.b * k, 4) << int(space) << " case " << i;
    }
  }
}

// ---- EXIF orientation -------------------------------------------------------------------------

// 32x16 gray image with four flat 16x8 quadrants (aligned with JPEG blocks, so they survive
// compression): TL=A, TR=B, BL=C, BR=D.
constexpr uint8_t kA = 20, kB = 90, kC = 160, kD = 230;

std::vector<uint8_t> quadrant_jpeg(std::vector<uint8_t> app1) {
  std::vector<uint8_t> px(32 * 16);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 32; ++x) px[y * 32 + x] = y < 8 ? (x < 16 ? kA : kB) : (x < 16 ? kC : kD);
  JpegSpec spec{32, 16, 1, JCS_GRAYSCALE};
  spec.app1 = std::move(app1);
  return write_jpeg(spec, px);
}

// Corner samples of a displayed image: TL, TR, BL, BR.
std::array<int, 4> corners(const ImageU8& img) {
  const int w = img.width() - 1, h = img.height() - 1;
  return {img.at(0, 0, 0), img.at(0, 0, w), img.at(0, h, 0), img.at(0, h, w)};
}

bool near(const std::array<int, 4>& got, const std::array<int, 4>& want) {
  for (int i = 0; i < 4; ++i)
    if (std::abs(got[i] - want[i]) > 2) return false;
  return true;
}

TEST(ImageIoExif, AllEightOrientationsBothByteOrders) {
  // What a viewer shows in each corner, per the EXIF definitions of the eight orientations.
  const std::array<int, 4> want[9] = {
      {}, {kA, kB, kC, kD},  // 1 as stored
      {kB, kA, kD, kC},      // 2 mirror horizontal
      {kD, kC, kB, kA},      // 3 rotate 180
      {kC, kD, kA, kB},      // 4 mirror vertical
      {kA, kC, kB, kD},      // 5 transpose
      {kC, kA, kD, kB},      // 6 rotate 90 CW
      {kD, kB, kC, kA},      // 7 transverse
      {kB, kD, kA, kC},      // 8 rotate 90 CCW
  };
  const ImageU8 stored = decode_image(quadrant_jpeg({}));
  ASSERT_TRUE(near(corners(stored), want[1]));
  for (bool big_endian : {false, true})
    for (int o = 1; o <= 8; ++o) {
      const std::vector<uint8_t> jpg = quadrant_jpeg(exif_block(o, big_endian));
      const ImageU8 img = decode_image(jpg);
      const bool swapped = o >= 5;
      ASSERT_EQ(img.width(), swapped ? 16 : 32) << o;
      ASSERT_EQ(img.height(), swapped ? 32 : 16) << o;
      const auto got = corners(img);
      EXPECT_TRUE(near(got, want[o])) << "orientation " << o << (big_endian ? " MM" : " II") << ": got "
                                      << got[0] << " " << got[1] << " " << got[2] << " " << got[3];
      // Every pixel: the same samples as the stored image, moved where the formula says.
      for (int y = 0; y < 16; ++y)
        for (int x = 0; x < 32; ++x) {
          int dx = x, dy = y;
          switch (o) {
            case 2: dx = 31 - x; break;
            case 3: dx = 31 - x; dy = 15 - y; break;
            case 4: dy = 15 - y; break;
            case 5: dx = y; dy = x; break;
            case 6: dx = 15 - y; dy = x; break;
            case 7: dx = 15 - y; dy = 31 - x; break;
            case 8: dx = y; dy = 31 - x; break;
          }
          ASSERT_EQ(img.at(0, dy, dx), stored.at(0, y, x)) << o << " " << x << "," << y;
        }
      // The option turns it off; f32 decoding orients the same way.
      LoadOptions off;
      off.apply_exif_orientation = false;
      expect_equal(decode_image(jpg, off), stored);
      const ImageF32 f = decode_image_f32(jpg);
      ASSERT_EQ(f.width(), img.width());
      EXPECT_EQ(f.at(0, 3, 5), img.at(0, 3, 5) / 255.0f);
    }
}

TEST(ImageIoExif, RgbImageIsOrientedInEveryChannel) {
  const ImageU8 src = test::constant_image(16, 8, 3, 0);
  ImageU8 marked = src.clone();
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) {
      marked.at(0, y, x) = 250;  // left half red-ish, right half blue-ish
      marked.at(2, y, x + 8) = 250;
    }
  JpegSpec spec{16, 8, 3, JCS_RGB};
  spec.app1 = exif_block(6, true);
  const ImageU8 img = decode_image(write_jpeg(spec, interleave(marked)));
  ASSERT_EQ(img.width(), 8);
  ASSERT_EQ(img.height(), 16);
  // Rotated 90 CW: the stored left half is now on top.
  EXPECT_GT(img.at(0, 2, 4), 200);
  EXPECT_LT(img.at(2, 2, 4), 60);
  EXPECT_GT(img.at(2, 13, 4), 200);
  EXPECT_LT(img.at(0, 13, 4), 60);
}

TEST(ImageIoExif, MalformedBlocksAreIgnored) {
  std::vector<std::vector<uint8_t>> bad;
  auto with = [](std::vector<uint8_t> b, size_t at, std::initializer_list<uint8_t> bytes) {
    std::copy(bytes.begin(), bytes.end(), b.begin() + ptrdiff_t(at));
    return b;
  };
  const std::vector<uint8_t> good = exif_block(6, false);  // IFD0 at TIFF offset 8 = byte 14
  bad.push_back(with(good, 10, {0xF0, 0xFF, 0xFF, 0xFF}));  // IFD0 offset far out of bounds
  bad.push_back(with(good, 10, {0xFF, 0xFF, 0xFF, 0xFF}));  // offset + 2 overflows 32 bits
  bad.push_back(with(with(good, 14, {0xFF, 0xFF}), 28, {0x13}));  // 65535 entries, 2 present
  bad.push_back(with(good, 6, {'X', 'X'}));                 // unknown byte order
  bad.push_back(with(good, 8, {43, 0}));                    // not TIFF magic 42
  bad.push_back(with(good, 36, {9, 0}));                    // orientation 9
  bad.push_back(with(good, 36, {0, 0}));                    // orientation 0
  bad.push_back(with(good, 30, {7, 0}));                    // orientation typed as SRATIONAL
  bad.push_back(with(good, 32, {2, 0}));                    // count 2
  bad.push_back({good.begin(), good.begin() + 30});         // cut inside the entry
  bad.push_back({'E', 'x', 'i', 'f', 0, 0, 'I', 'I'});      // header only
  bad.push_back({'E', 'x', 'i', 'f'});
  bad.push_back({'h', 't', 't', 'p', ':', '/', '/'});       // XMP-style APP1
  for (size_t i = 0; i < bad.size(); ++i) {
    const ImageU8 img = decode_image(quadrant_jpeg(bad[i]));
    EXPECT_EQ(img.width(), 32) << "case " << i;
    EXPECT_TRUE(near(corners(img), {kA, kB, kC, kD})) << "case " << i;
  }
  // The parser directly: every prefix of a valid block, and random bytes after a valid header.
  for (size_t n = 0; n <= good.size(); ++n) {
    EXPECT_EQ(image_detail::exif_orientation({good.data(), n}), n >= 38 ? 6 : 0) << n;
  }
  EXPECT_EQ(image_detail::exif_orientation(good), 6);
  uint32_t s = 99;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> b(good.begin(), good.begin() + 14);
    const int n = int(s % 64);
    for (int i = 0; i < n; ++i) {
      s = s * 1664525u + 1013904223u;
      b.push_back(uint8_t(s >> 24));
    }
    const int o = image_detail::exif_orientation(b);
    ASSERT_TRUE(o >= 0 && o <= 8);
  }
}

// ---- truncated, corrupt and hostile inputs ---------------------------------------------------

TEST(ImageIoErrors, TruncatedFilesAreCorruptData) {
  const std::vector<uint8_t> inputs[] = {valid_png(), valid_jpeg(), [] {
                                           JpegSpec spec{40, 24, 3, JCS_RGB};
                                           spec.progressive = true;
                                           return write_jpeg(spec, interleave(smooth_image(40, 24, 3)));
                                         }()};
  for (const auto& full : inputs) {
    ASSERT_NO_THROW(decode_image(full));
    // The positions the contract names, then every other cut as well: all must fail cleanly.
    std::vector<size_t> cuts = {10, full.size() / 2, full.size() - 20};
    for (size_t n = 0; n < full.size(); ++n) cuts.push_back(n);
    for (size_t n : cuts) {
      const std::vector<uint8_t> cut(full.begin(), full.begin() + ptrdiff_t(n));
      try {
        decode_image(cut, {}, "cut.img");
        ADD_FAILURE() << "cut at " << n << " of " << full.size() << " decoded";
      } catch (const Error& e) {
        ASSERT_EQ(e.code(), Errc::corrupt_data) << n << ": " << e.what();
        ASSERT_NE(std::string(e.what()).find("cut.img"), std::string::npos) << e.what();
      }
    }
  }
}

// Decoding must end in an image or a fovea::Error, nothing else (run under ASan too).
void decode_survives(const std::vector<uint8_t>& bytes) {
  try {
    const ImageU8 img = decode_image(bytes, {}, "fuzz");
    EXPECT_GT(img.width(), 0);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fuzz"), std::string::npos) << e.what();
  }
}

TEST(ImageIoErrors, GarbageAndFlippedBytesNeverCrash) {
  uint32_t s = 12345;
  const auto rnd = [&] {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    return s;
  };
  const std::vector<uint8_t> png = valid_png(), jpg = valid_jpeg();
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint8_t> b(rnd() % 600);
    for (auto& v : b) v = uint8_t(rnd());
    // A third pure garbage, a third behind a PNG signature (+ IHDR), a third behind JPEG SOI.
    if (trial % 3 == 1) std::copy(png.begin(), png.begin() + std::min<ptrdiff_t>(33, ptrdiff_t(b.size())), b.begin());
    if (trial % 3 == 2) std::copy(jpg.begin(), jpg.begin() + std::min<ptrdiff_t>(20, ptrdiff_t(b.size())), b.begin());
    decode_survives(b);
  }
  for (const auto* valid : {&png, &jpg}) {
    // Every byte flipped in turn, then a few multi-byte corruptions.
    for (size_t i = 0; i < valid->size(); ++i) {
      std::vector<uint8_t> b = *valid;
      b[i] ^= uint8_t(1 + rnd() % 255);
      decode_survives(b);
    }
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<uint8_t> b = *valid;
      for (int k = 0; k < 4; ++k) b[rnd() % b.size()] = uint8_t(rnd());
      decode_survives(b);
    }
  }
}

TEST(ImageIoErrors, CorruptJpegDataIsNotPaddedWithGray) {
  // Overwrite the middle of the entropy-coded data with a marker: libjpeg would warn and fill
  // the rest with gray; fovea refuses.
  std::vector<uint8_t> jpg = valid_jpeg();
  size_t sos = 0;
  for (size_t i = 0; i + 1 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) sos = i;
  ASSERT_GT(sos, 0u);
  const size_t mid = (sos + jpg.size()) / 2;
  jpg[mid] = 0xFF;
  jpg[mid + 1] = 0xD9;
  expect_error([&] { decode_image(jpg, {}, "gray.jpg"); }, Errc::corrupt_data, "gray.jpg", "JPEG");
}

// Rewrites the declared extents of an encoded image, keeping everything else.
std::vector<uint8_t> with_png_size(std::vector<uint8_t> png, uint32_t w, uint32_t h) {
  for (int i = 0; i < 4; ++i) {
    png[16 + i] = uint8_t(w >> (24 - 8 * i));
    png[20 + i] = uint8_t(h >> (24 - 8 * i));
  }
  const uLong crc = crc32(crc32(0, nullptr, 0), png.data() + 12, 17);  // IHDR type + data
  for (int i = 0; i < 4; ++i) png[29 + i] = uint8_t(crc >> (24 - 8 * i));
  return png;
}

std::vector<uint8_t> with_jpeg_size(std::vector<uint8_t> jpg, uint16_t w, uint16_t h) {
  for (size_t i = 2; i + 9 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && (jpg[i + 1] == 0xC0 || jpg[i + 1] == 0xC2)) {
      jpg[i + 5] = uint8_t(h >> 8);
      jpg[i + 6] = uint8_t(h);
      jpg[i + 7] = uint8_t(w >> 8);
      jpg[i + 8] = uint8_t(w);
      return jpg;
    }
  ADD_FAILURE() << "no SOF marker";
  return jpg;
}

TEST(ImageIoLimits, HugeDeclaredExtentsAreRefusedBeforeAllocating) {
  const std::vector<uint8_t> png = with_png_size(valid_png(), 20000, 20000);
  const std::vector<uint8_t> jpg = with_jpeg_size(valid_jpeg(), 20000, 20000);
  expect_error([&] { decode_image(png, {}, "big.png"); }, Errc::limit_exceeded, "big.png", "20000x20000");
  expect_error([&] { decode_image(jpg, {}, "big.jpg"); }, Errc::limit_exceeded, "big.jpg", "20000x20000");
  LoadOptions small;
  small.max_pixels = 24 * 16 - 1;
  expect_error([&] { decode_image(valid_png(), small); }, Errc::limit_exceeded, "<memory>");
  small.max_pixels = 24 * 16;
  EXPECT_NO_THROW(decode_image(valid_png(), small));

  // With the limit raised the decoders run into the missing data. The 60000x60000 cases would
  // need a 43 GB float buffer: out_of_memory (or an ASan abort) would mean it was attempted.
  LoadOptions raised;
  raised.max_pixels = uint64_t(1) << 40;
  expect_error([&] { decode_image(png, raised, "big.png"); }, Errc::corrupt_data, "big.png");
  expect_error([&] { decode_image(jpg, raised, "big.jpg"); }, Errc::corrupt_data, "big.jpg");
  expect_error([&] { decode_image_f32(with_png_size(valid_png(), 60000, 60000), raised, "huge.png"); },
               Errc::corrupt_data, "huge.png");
  expect_error([&] { decode_image_f32(with_jpeg_size(valid_jpeg(), 60000, 60000), raised, "huge.jpg"); },
               Errc::corrupt_data, "huge.jpg");
  // Zero extents: libpng and libjpeg both reject them as corrupt.
  expect_error([&] { decode_image(with_png_size(valid_png(), 0, 16), {}, "zero.png"); },
               Errc::corrupt_data, "zero.png");
  expect_error([&] { decode_image(with_jpeg_size(valid_jpeg(), 40, 0), {}, "zero.jpg"); },
               Errc::corrupt_data, "zero.jpg");
}

TEST(ImageIoLimits, OversizedFileIsRefusedBeforeReading) {
  const std::string path = test::temp_dir("ImageIoLimits_file") + "/sparse.png";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(200) << 20), 0);  // sparse: takes no disk space
  ::close(fd);
  LoadOptions tiny;
  tiny.max_pixels = 1000;
  expect_error([&] { load_image(path, tiny); }, Errc::limit_exceeded, path);
  fs::remove(path);
}

TEST(ImageIoErrors, FilesThatAreNotImages) {
  const std::string dir = test::temp_dir("ImageIoErrors_files");
  const auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir + "/" + name, std::ios::binary) << content;
    return dir + "/" + name;
  };
  const std::string empty = write("empty.png", "");
  expect_error([&] { load_image(empty); }, Errc::corrupt_data, empty, "empty");
  expect_error([&] { load_image(dir + "/nope.png"); }, Errc::io, dir + "/nope.png");
  expect_error([&] { load_image(dir); }, Errc::io, dir, "directory");
  expect_error([&] { load_image_f32(dir); }, Errc::io, dir);
  // Headers with nothing after them: FFmpeg's decoders say so (without FFmpeg: unsupported).
  const Errc stub = have_ffmpeg_stills() ? Errc::corrupt_data : Errc::unsupported;
  const std::string gif = write("a.png", std::string("GIF89a\x01\x00\x01\x00\x80\x00\x00", 13));
  expect_error([&] { load_image(gif); }, stub, gif, "GIF");
  const std::string webp = write("b.jpg", std::string("RIFF\x24\x00\x00\x00WEBPVP8 ", 16));
  expect_error([&] { load_image(webp); }, stub, webp, "WebP");
  const std::string heic = write("h.jpg", std::string("\0\0\0\x18" "ftypheic\0\0\0\0mif1heic", 24));
  expect_error([&] { load_image(heic); }, Errc::unsupported, heic, "HEIF");
  const std::string html = write("c.jpg", "<!DOCTYPE html><html><body>404</body></html>");
  expect_error([&] { load_image(html); }, Errc::unsupported, html, "HTML");
  // Common mistakes are named: a video, a Git LFS pointer (a clone without `git lfs pull`).
  const std::string mp4 = write("v.jpg", std::string("\0\0\0\x20" "ftypisom\0\0\x02\0isomiso2", 24));
  expect_error([&] { load_image(mp4); }, Errc::unsupported, mp4, "it is an MP4 / MOV video; `fovea video` reads videos");
  const std::string lfs = write("l.png", "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n");
  expect_error([&] { load_image(lfs); }, Errc::unsupported, lfs, "Git LFS pointer");
  const std::string bin = write("d.jpg", std::string("\x01\x02\x03\x04\x05", 5));
  expect_error([&] { load_image(bin); }, Errc::unsupported, bin, "not an image file fovea reads (PNG, JPEG");
  expect_error([&] { decode_image(std::vector<uint8_t>{0x89, 'P', 'N'}, {}, "sig"); },
               Errc::corrupt_data, "sig", "truncated");
  expect_error([&] { decode_image(std::vector<uint8_t>{0xFF, 0xD8}, {}, "sig"); }, Errc::corrupt_data,
               "sig", "truncated");
}

// ---- real files -------------------------------------------------------------------------------

// scikit-image's sample data (Debian's python3-skimage). Pixel values were read once with PIL
// (16-bit values with OpenCV), not at test time.
const std::string kSkimageData = "/usr/lib/python3/dist-packages/skimage/data/";

double channel_sum(const ImageU8& img, int c) {
  double s = 0;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) s += img.at(c, y, x);
  return s;
}

TEST(ImageIoFiles, SkimageSamplePngs) {
  if (!fs::is_directory(kSkimageData)) GTEST_SKIP() << kSkimageData << " is missing (python3-skimage)";
  const ImageU8 camera = load_image(kSkimageData + "camera.png");
  EXPECT_EQ(camera.channels(), 1);
  EXPECT_EQ(camera.width(), 512);
  EXPECT_EQ(camera.height(), 512);
  EXPECT_EQ(camera.at(0, 0, 0), 200);
  EXPECT_EQ(camera.at(0, 170, 256), 218);
  EXPECT_EQ(camera.at(0, 511, 511), 149);
  EXPECT_EQ(channel_sum(camera, 0), 33832495.0);

  const ImageU8 astronaut = load_image(kSkimageData + "astronaut.png");
  ASSERT_EQ(astronaut.channels(), 3);
  EXPECT_EQ(astronaut.width(), 512);
  EXPECT_EQ(astronaut.at(0, 170, 256), 213);
  EXPECT_EQ(astronaut.at(1, 170, 256), 201);
  EXPECT_EQ(channel_sum(astronaut, 0) + channel_sum(astronaut, 1) + channel_sum(astronaut, 2), 90124324.0);

  const ImageU8 chelsea = load_image(kSkimageData + "chelsea.png");
  EXPECT_EQ(chelsea.width(), 451);
  EXPECT_EQ(chelsea.height(), 300);
  EXPECT_EQ(chelsea.at(0, 0, 0), 143);
  EXPECT_EQ(chelsea.at(2, 299, 450), 128);

  // RGBA: alpha dropped, not composited (PIL convert("RGB") gives the same sum).
  const ImageU8 logo = load_image(kSkimageData + "logo.png");
  ASSERT_EQ(logo.channels(), 3);
  EXPECT_EQ(channel_sum(logo, 0) + channel_sum(logo, 1) + channel_sum(logo, 2), 136059231.0);

  // Palette with tRNS; 1-bit gray; a palette of grays.
  const ImageU8 indexed = load_image(kSkimageData + "foo3x5x4indexed.png");
  EXPECT_EQ(indexed.width(), 5);
  EXPECT_EQ(indexed.height(), 3);
  EXPECT_EQ(indexed.at(0, 0, 0), 127);
  EXPECT_EQ(indexed.at(2, 0, 0), 255);
  EXPECT_EQ(indexed.at(1, 2, 4), 31);
  const ImageU8 bilevel = load_image(kSkimageData + "checker_bilevel.png");
  EXPECT_EQ(bilevel.channels(), 1);
  EXPECT_EQ(channel_sum(bilevel, 0), 12750.0);
  const ImageU8 palette_gray = load_image(kSkimageData + "palette_gray.png");
  EXPECT_EQ(palette_gray.at(1, 9, 9), 25);

  // 16-bit RGB.
  const ImageU8 chess8 = load_image(kSkimageData + "chessboard_RGB.png");
  const ImageF32 chess = load_image_f32(kSkimageData + "chessboard_RGB.png");
  ASSERT_EQ(chess.channels(), 3);
  EXPECT_EQ(chess.width(), 200);
  EXPECT_EQ(chess.at(0, 100, 37), 12845.0f / 65535.0f);
  EXPECT_EQ(chess.at(2, 24, 24), 44880.0f / 65535.0f);
  EXPECT_EQ(chess8.at(2, 24, 24), 175);
  EXPECT_EQ(chess8.at(0, 24, 26), 44);  // 11411 / 257 = 44.4
  double sum = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 200; ++y)
      for (int x = 0; x < 200; ++x) sum += chess.at(c, y, x);
  EXPECT_NEAR(sum, 3932100000.0 / 65535.0, 0.01);
}

TEST(ImageIoFiles, SkimageSampleJpegs) {
  if (!fs::is_directory(kSkimageData)) GTEST_SKIP() << kSkimageData << " is missing (python3-skimage)";
  const ImageU8 rocket = load_image(kSkimageData + "rocket.jpg");
  ASSERT_EQ(rocket.channels(), 3);
  EXPECT_EQ(rocket.width(), 640);
  EXPECT_EQ(rocket.height(), 427);
  // PIL's means; a different libjpeg build may round a few samples differently.
  const double n = double(rocket.pixels());
  EXPECT_NEAR(channel_sum(rocket, 0) / n, 52.266, 0.5);
  EXPECT_NEAR(channel_sum(rocket, 1) / n, 61.294, 0.5);
  EXPECT_NEAR(channel_sum(rocket, 2) / n, 82.271, 0.5);
  // skimage ships a deliberately truncated JPEG.
  expect_error([&] { load_image(kSkimageData + "truncated.jpg"); }, Errc::corrupt_data, "truncated.jpg");
  // An animated GIF: its first frame (or, without FFmpeg, a clear refusal).
  if (have_ffmpeg_stills()) {
    const ImageU8 gif = load_image(kSkimageData + "no_time_for_that_tiny.gif");
    EXPECT_GT(gif.width(), 0);
    EXPECT_EQ(gif.channels(), 3);
  } else {
    expect_error([&] { load_image(kSkimageData + "no_time_for_that_tiny.gif"); }, Errc::unsupported,
                 "no_time_for_that_tiny.gif", "FFmpeg");
  }
}

// ---- the formats FFmpeg decodes (tests/data/images: scripts/make_image_fixtures.py) ----------

std::string still(const std::string& name) { return test::source_dir() + "/tests/data/images/" + name; }

template <typename T>
void expect_same_pixels(const Image<T>& a, const Image<T>& b, const std::string& what) {
  ASSERT_EQ(a.width(), b.width()) << what;
  ASSERT_EQ(a.height(), b.height()) << what;
  ASSERT_EQ(a.channels(), b.channels()) << what;
  for (int c = 0; c < a.channels(); ++c)
    for (int y = 0; y < a.height(); ++y)
      for (int x = 0; x < a.width(); ++x)
        ASSERT_EQ(a.at(c, y, x), b.at(c, y, x)) << what << " at c" << c << " y" << y << " x" << x;
}

TEST(ImageIoFfmpeg, BuildSaysWhichFormatsItReads) {
  const std::string formats = image_formats();
  EXPECT_EQ(formats.rfind("PNG, JPEG", 0), 0u) << formats;
  EXPECT_EQ(have_ffmpeg_stills(), FOVEA_BUILT_WITH_FFMPEG == 1) << formats;
  const auto& ext = image_file_extensions();
  EXPECT_NE(std::find(ext.begin(), ext.end(), ".jpeg"), ext.end());
  EXPECT_EQ(std::find(ext.begin(), ext.end(), ".webp") != ext.end(), have_ffmpeg_stills());
  if (!have_ffmpeg_stills()) {
    expect_error([&] { load_image(still("lossless.webp")); }, Errc::unsupported, "lossless.webp",
                 "this build of fovea has none");
    GTEST_SKIP() << "built without FFmpeg: PNG and JPEG only";
  }
  for (const char* f : {"WebP", "GIF", "BMP", "TIFF", "QOI", "JPEG 2000"})
    EXPECT_NE(formats.find(f), std::string::npos) << f << " missing from " << formats;
}

TEST(ImageIoFfmpeg, LosslessFormatsEqualTheSourceExactly) {
  if (!have_ffmpeg_stills()) GTEST_SKIP() << "built without FFmpeg";
  const ImageU8 rgb = load_image(still("source.png"));
  const ImageU8 gray = load_image(still("gray.png"));
  ASSERT_EQ(rgb.channels(), 3);
  ASSERT_EQ(gray.channels(), 1);
  // rgba.webp: alpha 128 everywhere, dropped as PNG's is.
  for (const char* name : {"lossless.webp", "rgba.webp", "rgb.bmp", "rgb.tiff", "rgb.qoi", "rgb.ppm", "rgb.j2k"})
    expect_same_pixels(load_image(still(name)), rgb, name);
  for (const char* name : {"gray.pgm", "gray.tiff"}) expect_same_pixels(load_image(still(name)), gray, name);
  // JPEG XL is refused by name, never handed to FFmpeg 5.1's libjxl wrapper, which spins forever
  // on some truncated files (hang_ffmpeg51.jxl: 29 bytes, found by fuzz_still).
  for (const char* name : {"rgb.jxl", "hang_ffmpeg51.jxl"})
    expect_error([&] { load_image(still(name)); }, Errc::unsupported, name, "JPEG XL is not supported");
  // In memory too, under the caller's name.
  const std::vector<uint8_t> bytes = read_file(still("rgb.qoi"));
  expect_same_pixels(decode_image(bytes, {}, "mem.qoi"), rgb, "mem.qoi");
}

TEST(ImageIoFfmpeg, SixteenBitSamplesKeepTheirPrecisionInF32) {
  if (!have_ffmpeg_stills()) GTEST_SKIP() << "built without FFmpeg";
  const ImageF32 ref = load_image_f32(still("source16.png"));
  const ImageU8 ref8 = load_image(still("source16.png"));
  for (const char* name : {"rgb16.tiff", "source16.ppm"}) {
    const ImageF32 f = load_image_f32(still(name));
    expect_same_pixels(f, ref, name);
    expect_same_pixels(load_image(still(name)), ref8, name);
  }
  // The low byte is there: not a multiple of 257 / 65535 everywhere.
  int fine = 0;
  for (int x = 0; x < ref.width(); ++x) fine += std::fmod(ref.at(0, 0, x) * 65535.0f, 257.0f) > 0.5f;
  EXPECT_GT(fine, 10);
}

TEST(ImageIoFfmpeg, LossyWebpAndGifAgreeWithPillow) {
  if (!have_ffmpeg_stills()) GTEST_SKIP() << "built without FFmpeg";
  // GIF: a palette, so exact.
  expect_same_pixels(load_image(still("palette.gif")), load_image(still("palette.gif.pil.png")), "palette.gif");
  // Lossy WebP: 4:2:0 YUV. libwebp (Pillow) and FFmpeg's VP8 decoder give the same YUV; they
  // upsample chroma and round the BT.601 conversion differently.
  const ImageU8 webp = load_image(still("lossy.webp"));
  const ImageU8 pil = load_image(still("lossy.webp.pil.png"));
  ASSERT_EQ(webp.width(), pil.width());
  ASSERT_EQ(webp.height(), pil.height());
  ASSERT_EQ(webp.channels(), 3);
  double sum = 0;
  int worst = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < webp.height(); ++y)
      for (int x = 0; x < webp.width(); ++x) {
        const int d = std::abs(int(webp.at(c, y, x)) - int(pil.at(c, y, x)));
        sum += d;
        worst = std::max(worst, d);
      }
  const double mean = sum / double(webp.pixels() * 3);
  EXPECT_LT(mean, kLossyWebpMeanDiff) << "worst " << worst;
  EXPECT_LE(worst, kLossyWebpMaxDiff) << "mean " << mean;
}

TEST(ImageIoFfmpeg, TiffAndWebpOrientationIsApplied) {
  if (!have_ffmpeg_stills()) GTEST_SKIP() << "built without FFmpeg";
  const ImageU8 src = load_image(still("source.png"));
  for (const char* name : {"oriented.webp", "oriented.tiff"}) {
    const ImageU8 shown = load_image(still(name));  // orientation 6: 90 degrees clockwise
    ASSERT_EQ(shown.width(), src.height()) << name;
    ASSERT_EQ(shown.height(), src.width()) << name;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < shown.height(); ++y)
        for (int x = 0; x < shown.width(); ++x)
          ASSERT_EQ(shown.at(c, y, x), src.at(c, src.height() - 1 - x, y)) << name;
    LoadOptions stored;
    stored.apply_exif_orientation = false;
    expect_same_pixels(load_image(still(name), stored), src, name);
  }
}

// Gray + alpha (FFmpeg's ya8) is full-range gray: taken as limited range, swscale stretched it
// (mid-gray 178 came out 189).
TEST(ImageIoFfmpeg, GrayWithAlphaIsFullRange) {
  if (!have_ffmpeg_stills()) GTEST_SKIP() << "built without FFmpeg";
  const ImageU8 gray = load_image(still("gray.png"));
  for (const char* name : {"gray_alpha.tiff", "gray_alpha.pam"}) expect_same_pixels(load_image(still(name)), gray, name);
}

// FFmpeg 5.1's WebP decoder reads no animation chunks; fovea gives the first frame, placed on
// its canvas as Pillow shows it.
TEST(ImageIoFfmpeg, AnimatedWebpGivesItsFirstFrame) {
  if (!have_ffmpeg_stills()) GTEST_SKIP() << "built without FFmpeg";
  expect_same_pixels(load_image(still("anim.webp")), load_image(still("source.png")), "anim.webp");
  expect_same_pixels(load_image(still("anim_offset.webp")), load_image(still("anim_offset.expected.png")),
                     "anim_offset.webp");
  expect_same_pixels(load_image_f32(still("anim_offset.webp")), load_image_f32(still("anim_offset.expected.png")),
                     "anim_offset.webp (f32)");
  // The canvas is checked against the limit before the frame is cut out.
  LoadOptions tiny;
  tiny.max_pixels = 100;
  expect_error([&] { (void)load_image(still("anim.webp"), tiny); }, Errc::limit_exceeded, "anim.webp", "100");
  // An animation whose frame chunk is cut short, or holds no picture: a clear error.
  std::vector<uint8_t> bytes = read_file(still("anim_offset.webp"));
  const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + 60);
  expect_error([&] { decode_image(cut, {}, "cut.webp"); }, Errc::corrupt_data, "cut.webp", "first frame");
  const auto vp8l = std::search(bytes.begin(), bytes.end(), std::begin("VP8L"), std::begin("VP8L") + 4);
  ASSERT_NE(vp8l, bytes.end());
  std::copy_n("JUNK", 4, vp8l);
  expect_error([&] { decode_image(bytes, {}, "junk.webp"); }, Errc::corrupt_data, "junk.webp", "no VP8");
}

// What FFmpeg 5.1 reads wrong (JPEG-in-TIFF: an all-black picture, no error) or not at all
// (float samples: "Invalid data") is refused by name.
TEST(ImageIoFfmpeg, TiffsFfmpegCannotReadAreRefusedByName) {
  if (!have_ffmpeg_stills()) GTEST_SKIP() << "built without FFmpeg";
  expect_error([&] { (void)load_image(still("jpeg.tiff")); }, Errc::unsupported, "jpeg.tiff", "JPEG-compressed TIFF");
  expect_error([&] { (void)load_image(still("float.tiff")); }, Errc::unsupported, "float.tiff", "floating-point");
}

// The CLI reads them like PNG and JPEG, one file or a folder of them (a batch).
TEST(ImageIoFfmpeg, CliTokenizesWebpAndFoldersOfStills) {
  if (!have_ffmpeg_stills()) GTEST_SKIP() << "built without FFmpeg";
  const std::string dir = test::temp_dir("ImageIoFfmpeg_cli");
  const test::RunResult one =
      test::run_cli({"tokenize", still("lossy.webp"), "--budget", "6", "-o", dir + "/one.safetensors", "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("\"width\": 48"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("\"height\": 32"), std::string::npos) << one.out;
  fs::create_directories(dir + "/in");
  for (const std::string name : {"lossless.webp", "palette.gif", "rgb.tiff", "rgb.qoi", "gray.pgm", "lossy.webp.pil.png"}) {
    std::string flat = name;  // a.b.ext -> a_b.ext: distinct output names
    for (size_t dot = flat.find('.'); dot != flat.rfind('.'); dot = flat.find('.')) flat[dot] = '_';
    const size_t last = flat.rfind('.');
    flat = flat.substr(0, last) + "_" + flat.substr(last + 1) + flat.substr(last);
    fs::copy_file(still(name), dir + "/in/" + flat);
  }
  const test::RunResult batch = test::run_cli({"tokenize", dir + "/in", "--budget", "6", "-o", dir + "/out"});
  ASSERT_EQ(batch.exit_code, 0) << batch.err;
  EXPECT_NE(batch.out.find("6 images, 6 ok"), std::string::npos) << batch.out << "\n" << batch.err;
  for (const char* out : {"lossless_webp", "palette_gif", "rgb_tiff", "rgb_qoi", "gray_pgm", "lossy_webp_pil_png"})
    EXPECT_TRUE(fs::exists(dir + "/out/" + std::string(out) + ".safetensors")) << out;
  // A broken one: one clear line, exit 1, no output.
  const std::string bad = dir + "/bad.webp";
  std::ofstream(bad, std::ios::binary) << std::string("RIFF\x24\x00\x00\x00WEBPVP8 \x10\x00\x00\x00", 20);
  const test::RunResult broken = test::run_cli({"tokenize", bad, "-o", dir + "/bad.safetensors"});
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_EQ(broken.err.rfind("fovea: error: cannot decode '" + bad + "': WebP", 0), 0u) << broken.err;
  EXPECT_EQ(std::count(broken.err.begin(), broken.err.end(), '\n'), 1) << broken.err;
  EXPECT_FALSE(fs::exists(dir + "/bad.safetensors"));
}

// A header that claims 60000 x 60000 is refused before the decoder runs; the rest of the file
// does not matter. Every cut of every fixture is an error or a picture, never a crash.
TEST(ImageIoFfmpeg, HugeHeadersAndCutsAreCleanErrors) {
  if (!have_ffmpeg_stills()) GTEST_SKIP() << "built without FFmpeg";
  quiet_ffmpeg_log();  // the cuts make FFmpeg's decoders complain
  const auto patched = [](const char* name, size_t at, std::initializer_list<uint8_t> b) {
    std::vector<uint8_t> bytes = read_file(still(name));
    std::copy(b.begin(), b.end(), bytes.begin() + ptrdiff_t(at));
    return bytes;
  };
  const uint8_t lo = 60000 & 0xFF, hi = 60000 >> 8;
  const std::pair<const char*, std::vector<uint8_t>> bombs[] = {
      {"GIF", patched("palette.gif", 6, {lo, hi, lo, hi})},
      {"BMP", patched("rgb.bmp", 18, {lo, hi, 0, 0, lo, hi, 0, 0})},
      {"QOI", patched("rgb.qoi", 4, {0, 0, hi, lo, 0, 0, hi, lo})},
      {"WebP", patched("lossless.webp", 21, {0x5F, 0xEA, 0xFB, 0x1F})},  // VP8L: 14-bit extents - 1
      {"PPM", [] {
         const std::string h = "P6\n60000 60000\n255\n";
         return std::vector<uint8_t>(h.begin(), h.end());
       }()},
  };
  LoadOptions small;
  small.max_pixels = 1'000'000;
  for (const auto& bomb : bombs)  // not a structured binding: clang 14 cannot capture one
    expect_error([&] { decode_image(bomb.second, small, "bomb"); }, Errc::limit_exceeded, "bomb", bomb.first);
  // The fixtures are 48x32: a limit of 100 pixels refuses each, from the header (TIFF's IFD,
  // JP2's ihdr box, ...).
  LoadOptions tiny;
  tiny.max_pixels = 100;
  for (const char* name : {"rgb.tiff", "rgb16.tiff", "rgb.j2k", "lossless.webp", "lossy.webp", "gray.pgm"})
    expect_error([&] { (void)load_image(still(name), tiny); }, Errc::limit_exceeded, name, "100");
  for (const char* name : {"lossless.webp", "lossy.webp", "palette.gif", "rgb.bmp", "rgb.tiff", "rgb.qoi",
                           "rgb.j2k", "gray.pgm", "anim.webp", "anim_offset.webp", "gray_alpha.tiff"}) {
    const std::vector<uint8_t> full = read_file(still(name));
    for (size_t n = 0; n < full.size(); n += 1 + n / 16) {
      const std::vector<uint8_t> cut(full.begin(), full.begin() + ptrdiff_t(n));
      try {
        const ImageU8 img = decode_image(cut, {}, "cut");
        EXPECT_GT(img.pixels(), 0u);  // some decoders show what they have, as viewers do
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cut"), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace fovea
