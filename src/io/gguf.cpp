// The GGUF reader: one bounds-checked cursor over the mapped file, every count checked against
// the bytes left before anything is allocated, then the tensor table checked as a whole
// (alignment, bounds, overlap).
#include "fovea/gguf.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "fovea/error.hpp"
#include "io/file_bytes.hpp"

namespace fovea {

namespace {

// ggml's type table (ggml.c type_traits): block size in elements and bytes per block. Every
// type a valid file may hold is listed, so such a file validates even when fovea cannot decode
// some of its tensors; gaps are types ggml removed.
struct TypeTraits {
  uint32_t id;
  const char* name;
  uint32_t block;
  uint32_t bytes;
};
constexpr TypeTraits kTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
};

}  // namespace

bool ggml_type_supported(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::f32: case GgmlType::f16: case GgmlType::bf16: case GgmlType::q4_0: case GgmlType::q4_1:
    case GgmlType::q5_0: case GgmlType::q5_1: case GgmlType::q8_0: case GgmlType::q4_k: case GgmlType::q5_k:
    case GgmlType::q6_k: case GgmlType::q8_k:
      return true;
  }
  return false;
}

const char* ggml_supported_types() { return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and Q8_K"; }

namespace {

const TypeTraits* type_traits(uint32_t id) {
  for (const TypeTraits& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    case GgufType::string: case GgufType::array: return 0;
  }
  return 0;
}

bool valid_type(uint32_t t) { return t <= 12; }

using Scalar = std::variant<uint64_t, int64_t, double, bool, std::string>;

// What is being read, for messages: a string, or a callable that builds one. Call sites pass
// callables, so a message is built only when a read fails (building one eagerly cost a string
// per field and per array element: a vocabulary array of 150k strings built 150k labels).
template <typename W>
std::string name_of(const W& what) {
  if constexpr (std::is_invocable_v<const W&>) return what();
  else return std::string(what);
}

// A cursor that never reads past `end`; every failure names what was being read.
class Reader {
 public:
  Reader(const uint8_t* p, uint64_t size, const std::string& path) : base_(p), size_(size), path_(path) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  Error fail(const std::string& why) const {
    return Error(Errc::corrupt_data, "'" + path_ + "' is not a valid GGUF file: " + why);
  }
  template <typename W> void need(uint64_t n, const W& what) const {
    if (n > left())
      throw fail(name_of(what) + " runs past the end of the file (needs " + std::to_string(n) + " bytes at offset " +
                 std::to_string(pos_) + ", " + std::to_string(left()) + " left)");
  }
  template <typename T, typename W> T get(const W& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename W> std::string string(const W& what, uint64_t max_bytes) {
    const uint64_t n = get<uint64_t>([&] { return name_of(what) + " length"; });
    if (n > left())
      throw fail(name_of(what) + " claims " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) + ", only " +
                 std::to_string(left()) + " left");
    if (n > max_bytes)
      throw Error(Errc::limit_exceeded, "'" + path_ + "': " + name_of(what) + " of " + std::to_string(n) +
                                            " bytes exceeds the limit of " + std::to_string(max_bytes));
    std::string s(reinterpret_cast<const char*>(base_ + pos_), size_t(n));
    pos_ += n;
    return s;
  }
  template <typename W> Scalar scalar(GgufType t, const W& what, uint64_t max_string) {
    switch (t) {
      case GgufType::u8: return uint64_t(get<uint8_t>(what));
      case GgufType::i8: return int64_t(get<int8_t>(what));
      case GgufType::u16: return uint64_t(get<uint16_t>(what));
      case GgufType::i16: return int64_t(get<int16_t>(what));
      case GgufType::u32: return uint64_t(get<uint32_t>(what));
      case GgufType::i32: return int64_t(get<int32_t>(what));
      case GgufType::u64: return get<uint64_t>(what);
      case GgufType::i64: return get<int64_t>(what);
      case GgufType::f32: return double(get<float>(what));
      case GgufType::f64: return get<double>(what);
      case GgufType::boolean: {
        const uint8_t b = get<uint8_t>(what);
        if (b > 1) throw fail(name_of(what) + " is a bool of value " + std::to_string(b));
        return b != 0;
      }
      case GgufType::string: return string(what, max_string);
      case GgufType::array: break;
    }
    throw fail(name_of(what) + ": nested arrays are not allowed");
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

Error wrong_type(std::string_view key, GgufType have, const char* want) {
  return Error(Errc::corrupt_data, "GGUF key " + std::string(key) + " has type " + std::string(to_string(have)) +
                                       ", expected " + want);
}

bool is_int(GgufType t) {
  return t == GgufType::u8 || t == GgufType::i8 || t == GgufType::u16 || t == GgufType::i16 || t == GgufType::u32 ||
         t == GgufType::i32 || t == GgufType::u64 || t == GgufType::i64;
}

std::optional<int64_t> scalar_int(const Scalar& s) {
  if (const auto* u = std::get_if<uint64_t>(&s)) {
    if (*u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return int64_t(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&s)) return *i;
  if (const auto* b = std::get_if<bool>(&s)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> scalar_float(const Scalar& s) {
  if (const auto* d = std::get_if<double>(&s)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&s)) return double(*u);
  if (const auto* i = std::get_if<int64_t>(&s)) return double(*i);
  return std::nullopt;
}

}  // namespace

std::string_view to_string(GgufType t) {
  switch (t) {
    case GgufType::u8: return "UINT8";
    case GgufType::i8: return "INT8";
    case GgufType::u16: return "UINT16";
    case GgufType::i16: return "INT16";
    case GgufType::u32: return "UINT32";
    case GgufType::i32: return "INT32";
    case GgufType::f32: return "FLOAT32";
    case GgufType::boolean: return "BOOL";
    case GgufType::string: return "STRING";
    case GgufType::array: return "ARRAY";
    case GgufType::u64: return "UINT64";
    case GgufType::i64: return "INT64";
    case GgufType::f64: return "FLOAT64";
  }
  return "?";
}

std::string ggml_type_name(uint32_t type) {
  if (const TypeTraits* t = type_traits(type)) return t->name;
  std::string s = "#";  // (appended: GCC 12 warns a false -Wrestrict on "#" + string)
  s += std::to_string(type);
  return s;
}

int64_t GgufValue::as_int(std::string_view key) const {
  if (!is_int(type) && type != GgufType::boolean) throw wrong_type(key, type, "an integer");
  const auto v = scalar_int(scalar);
  if (!v) throw Error(Errc::corrupt_data, "GGUF key " + std::string(key) + " is out of range");
  return *v;
}
double GgufValue::as_float(std::string_view key) const {
  if (type != GgufType::f32 && type != GgufType::f64 && !is_int(type)) throw wrong_type(key, type, "a number");
  return *scalar_float(scalar);
}
bool GgufValue::as_bool(std::string_view key) const {
  if (type != GgufType::boolean) throw wrong_type(key, type, "BOOL");
  return std::get<bool>(scalar);
}
const std::string& GgufValue::as_string(std::string_view key) const {
  if (type != GgufType::string) throw wrong_type(key, type, "STRING");
  return std::get<std::string>(scalar);
}
std::vector<double> GgufValue::as_floats(std::string_view key) const {
  if (type != GgufType::array ||
      !(element_type == GgufType::f32 || element_type == GgufType::f64 || is_int(element_type)))
    throw wrong_type(key, type == GgufType::array ? element_type : type, "an array of numbers");
  std::vector<double> out;
  out.reserve(array.size());
  for (const Scalar& s : array) out.push_back(*scalar_float(s));
  return out;
}
std::vector<int64_t> GgufValue::as_ints(std::string_view key) const {
  if (type != GgufType::array || !is_int(element_type))
    throw wrong_type(key, type == GgufType::array ? element_type : type, "an array of integers");
  std::vector<int64_t> out;
  for (const Scalar& s : array) {
    const auto v = scalar_int(s);
    if (!v) throw Error(Errc::corrupt_data, "GGUF key " + std::string(key) + " holds an out-of-range integer");
    out.push_back(*v);
  }
  return out;
}

std::vector<int64_t> GgufTensorInfo::shape() const { return {ne.rbegin(), ne.rend()}; }
int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // checked against overflow at parse time
  return n;
}

struct GgufFile::Mapping {
  io_detail::FileBytes file;
  const uint8_t* base() const { return file.data(); }
  uint64_t bytes() const { return file.size(); }
};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path, const GgufLimits& limits) {
  GgufFile f;
  f.path_ = path;
  f.map_ = std::make_unique<Mapping>(Mapping{io_detail::FileBytes::map(path)});
  f.parse(limits);
  return f;
}

GgufFile GgufFile::from_bytes(std::span<const uint8_t> bytes, const std::string& name, const GgufLimits& limits) {
  GgufFile f;
  f.path_ = name;
  f.map_ = std::make_unique<Mapping>(Mapping{io_detail::FileBytes::copy(bytes)});
  f.parse(limits);
  return f;
}

namespace {

// Error(limit_exceeded) when a file claims more of `what` than the caller allows.
template <class W>
void check_limit(const std::string& path, const W& what, uint64_t n, uint64_t max) {
  if (n > max)
    throw Error(Errc::limit_exceeded, "'" + path + "': " + std::to_string(n) + " " + name_of(what) +
                                          " exceed the limit of " + std::to_string(max));
}

// The value of a key/value pair, read after its key (kwhat names the key in messages).
template <class W>
GgufValue read_value(Reader& r, const W& kwhat, const std::string& path, const GgufLimits& limits) {
  const uint32_t t = r.get<uint32_t>([&] { return kwhat() + "'s type"; });
  if (!valid_type(t)) throw r.fail(kwhat() + " has unknown value type " + std::to_string(t));
  GgufValue v;
  v.type = GgufType(t);
  if (v.type != GgufType::array) {
    v.scalar = r.scalar(v.type, kwhat, limits.max_string_bytes);
    return v;
  }
  const uint32_t et = r.get<uint32_t>([&] { return kwhat() + "'s element type"; });
  if (!valid_type(et)) throw r.fail(kwhat() + " is an array of unknown type " + std::to_string(et));
  if (GgufType(et) == GgufType::array) throw r.fail(kwhat() + ": nested arrays are not supported");
  v.element_type = GgufType(et);
  const uint64_t n = r.get<uint64_t>([&] { return kwhat() + "'s array length"; });
  const uint64_t min_size = v.element_type == GgufType::string ? 8 : scalar_size(v.element_type);
  if (n > r.left() / min_size)
    throw r.fail(kwhat() + " claims " + std::to_string(n) + " array elements, more than the " +
                 std::to_string(r.left()) + " bytes left can hold");
  check_limit(path, [&] { return "array elements in " + kwhat(); }, n, limits.max_array_elements);
  v.array.reserve(size_t(n));
  for (uint64_t j = 0; j < n; ++j)
    v.array.push_back(r.scalar(v.element_type, [&] { return kwhat() + "[" + std::to_string(j) + "]"; },
                               limits.max_string_bytes));
  return v;
}

// The i-th tensor info: name, extents, type and offset, its byte size from its type's blocks.
GgufTensorInfo read_tensor_info(Reader& r, uint64_t i, uint64_t alignment, const std::string& path) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  GgufTensorInfo t;
  t.name = r.string([&] { return "tensor " + std::to_string(i) + "'s name"; }, 4096);
  const auto what = [&] { return "tensor " + t.name; };
  if (t.name.empty()) throw r.fail("tensor " + std::to_string(i) + " has an empty name");
  const uint32_t n_dims = r.get<uint32_t>([&] { return what() + "'s dimension count"; });
  if (n_dims < 1 || n_dims > 4) throw r.fail(what() + " has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne = r.get<uint64_t>([&] { return what() + "'s dimension " + std::to_string(d); });
    // A zero extent is an empty tensor: no mmproj holds one, and the loaders would take it
    // for an absent tensor (a projector of width 0); empty tensors also share offsets.
    if (ne == 0) throw r.fail(what() + "'s dimension " + std::to_string(d) + " is 0");
    if (ne > uint64_t(kMax) || uint64_t(numel) > uint64_t(kMax) / ne) throw r.fail(what() + "'s element count overflows");
    t.ne.push_back(int64_t(ne));
    numel *= int64_t(ne);
  }
  t.type = r.get<uint32_t>([&] { return what() + "'s type"; });
  t.offset = r.get<uint64_t>([&] { return what() + "'s offset"; });
  const TypeTraits* tt = type_traits(t.type);
  if (!tt)
    throw Error(Errc::unsupported, "'" + path + "': unsupported GGUF tensor type " + std::to_string(t.type) + " in " +
                                       t.name);
  if (t.ne[0] % tt->block != 0)
    throw r.fail(what() + " has rows of " + std::to_string(t.ne[0]) + " elements, not a multiple of " + tt->name +
                 "'s block of " + std::to_string(tt->block));
  const uint64_t blocks = uint64_t(numel) / tt->block;
  if (blocks > std::numeric_limits<uint64_t>::max() / tt->bytes) throw r.fail(what() + "'s byte size overflows");
  t.size_bytes = blocks * tt->bytes;
  if (t.offset % alignment != 0)
    throw r.fail(what() + "'s offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                 std::to_string(alignment));
  return t;
}

// Every tensor lies inside the data section of data_size bytes, and no two overlap.
void check_extents(Reader& r, const std::vector<GgufTensorInfo>& tensors, uint64_t data_size) {
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : tensors) {
    if (t.offset > data_size || t.size_bytes > data_size - t.offset)
      throw r.fail("tensor " + t.name + " (" + std::to_string(t.size_bytes) + " bytes at data offset " +
                   std::to_string(t.offset) + ") runs past the end of the " + std::to_string(data_size) +
                   "-byte data section; the file is truncated or corrupt");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.size_bytes > 0 && b.offset < a.offset + a.size_bytes)
      throw r.fail("tensors " + a.name + " and " + b.name + " overlap (data offsets " + std::to_string(a.offset) +
                   "+" + std::to_string(a.size_bytes) + " and " + std::to_string(b.offset) + ")");
  }
}

}  // namespace

void GgufFile::parse(const GgufLimits& limits) {
  Reader r(map_->base(), map_->bytes(), path_);
  if (r.left() < 4 || std::memcmp(map_->base(), "GGUF", 4) != 0)
    throw r.fail("it does not start with the magic \"GGUF\"");
  r.get<uint32_t>("magic");
  version_ = r.get<uint32_t>("version");
  if (version_ == 0x02000000u || version_ == 0x03000000u)
    throw Error(Errc::unsupported, "'" + path_ + "' is a big-endian GGUF file; only little-endian files are supported");
  if (version_ != 2 && version_ != 3)
    throw Error(Errc::unsupported, "'" + path_ + "': GGUF version " + std::to_string(version_) +
                                       " is not supported (2 and 3 are)");
  const uint64_t n_tensors = r.get<uint64_t>("tensor count");
  const uint64_t n_kv = r.get<uint64_t>("key/value count");
  // The smallest key/value pair is 13 bytes (empty key, type, one byte); the smallest tensor
  // info 32 (empty name, n_dims, one dim, type, offset): counts beyond that cannot be real.
  if (n_kv > r.left() / 13)
    throw r.fail("key/value count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(r.left()) +
                 " bytes left");
  check_limit(path_, "key/value pairs", n_kv, limits.max_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.string([&] { return "key/value pair " + std::to_string(i) + "'s key"; },
                               limits.max_string_bytes);
    GgufValue v = read_value(r, [&] { return "key " + key; }, path_, limits);
    if (kv_.count(key)) throw r.fail("key " + key + " appears twice");
    kv_.emplace(std::move(key), std::move(v));
  }
  if (const GgufValue* a = find_kv("general.alignment")) {
    if (a->type != GgufType::u32) throw r.fail("general.alignment has type " + std::string(to_string(a->type)) + ", expected UINT32");
    const uint64_t al = std::get<uint64_t>(a->scalar);
    if (al == 0 || (al & (al - 1)) != 0) throw r.fail("general.alignment " + std::to_string(al) + " is not a power of two");
    alignment_ = al;
  }

  if (n_tensors > r.left() / 32)
    throw r.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(r.left()) +
                 " bytes left");
  check_limit(path_, "tensors", n_tensors, limits.max_tensors);
  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t = read_tensor_info(r, i, alignment_, path_);
    if (tensor_index_.count(t.name)) throw r.fail("tensor " + t.name + " appears twice");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t pos = r.pos();
  const uint64_t file_size = map_->bytes();
  const uint64_t start = pos % alignment_ == 0 ? pos : pos + (alignment_ - pos % alignment_);
  data_size_ = start <= file_size ? file_size - start : 0;
  data_ = reinterpret_cast<const std::byte*>(map_->base()) + std::min(start, file_size);
  check_extents(r, tensors_, data_size_);
}

const GgufValue* GgufFile::find_kv(std::string_view key) const {
  auto it = kv_.find(std::string(key));
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> GgufFile::data(const GgufTensorInfo& t) const {
  return {data_ + t.offset, size_t(t.size_bytes)};
}

Tensor GgufFile::load_f32(const GgufTensorInfo& t) const {
  Tensor out(DType::f32, t.shape());
  float* dst = out.data<float>();
  const std::byte* src = data_ + t.offset;
  const int64_t n = t.numel();
  switch (t.type) {
    case uint32_t(GgmlType::f32):
      std::memcpy(dst, src, size_t(n) * 4);
      break;
    case uint32_t(GgmlType::bf16):
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      break;
    default:
      if (!ggml_dequantize(t.type, src, n, dst))
        throw Error(Errc::unsupported, "'" + path_ + "': unsupported GGUF tensor type " + ggml_type_name(t.type) +
                                           " in " + t.name + " (fovea reads " + ggml_supported_types() + ")");
  }
  return out;
}

bool looks_like_gguf(const std::string& path) {
  // Regular files only (the reader refuses the rest): a FIFO would block here for a writer.
  const io_detail::InputFile in(path);
  if (!in.ok()) return false;
  char magic[4] = {};
  const ssize_t n = ::read(in.fd(), magic, 4);
  return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace fovea
