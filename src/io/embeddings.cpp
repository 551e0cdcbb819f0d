// The embeddings file (fovea/embeddings.hpp): a safetensors file with a fixed table of tensors.
#include "fovea/embeddings.hpp"

#include <string>
#include <utility>

#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/safetensors.hpp"

namespace fovea {

namespace {

std::string shape_text(const Tensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.rank(); ++i) s += (i ? ", " : "") + std::to_string(t.dim(i));
  return s + "]";
}

bool present(const Tensor& t) { return t.rank() > 0; }

void expect(bool ok, const std::string& what) {
  if (!ok) throw Error(Errc::invalid_argument, what);
}

void expect_tensor(const Tensor& t, const char* name, DType dtype, size_t rank, int64_t rows) {
  expect(t.dtype() == dtype && t.rank() == rank,
         std::string("embeddings file: '") + name + "' must be " + std::string(dtype_name(dtype)) + " of rank " +
             std::to_string(rank) + ", got " + std::string(dtype_name(t.dtype())) + " " + shape_text(t));
  expect(rows < 0 || t.dim(0) == rows, std::string("embeddings file: '") + name + "' has " + std::to_string(t.dim(0)) +
                                           " rows, the embeddings have " + std::to_string(rows));
}

struct Slot {
  const char* name;
  Tensor EmbeddingsFile::*member;
};
constexpr Slot kSlots[] = {
    {"embeddings", &EmbeddingsFile::embeddings}, {"positions", &EmbeddingsFile::positions},
    {"levels", &EmbeddingsFile::levels},         {"projected", &EmbeddingsFile::projected},
    {"class_token", &EmbeddingsFile::class_token}, {"pooled", &EmbeddingsFile::pooled},
    {"image_embeds", &EmbeddingsFile::image_embeds}, {"logits", &EmbeddingsFile::logits},
};

}  // namespace

void validate_embeddings(const EmbeddingsFile& f) {
  expect(present(f.embeddings), "embeddings file: no 'embeddings' tensor");
  expect_tensor(f.embeddings, "embeddings", DType::f32, 2, -1);
  const int64_t n = f.embeddings.dim(0);
  expect_tensor(f.positions, "positions", DType::f32, 2, n);
  expect(f.positions.dim(1) == 4, "embeddings file: 'positions' must be [N, 4], got " + shape_text(f.positions));
  expect_tensor(f.levels, "levels", DType::i32, 1, n);
  if (present(f.projected)) expect_tensor(f.projected, "projected", DType::f32, 2, n);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"class_token", &f.class_token},
                                {"pooled", &f.pooled}, {"image_embeds", &f.image_embeds}, {"logits", &f.logits}})
    if (present(*t)) expect_tensor(*t, name, DType::f32, 2, 1);
  for (const auto& [name, t] : f.extra)
    for (const Slot& s : kSlots)
      expect(name != s.name, "embeddings file: extra tensor '" + name + "' shadows a standard one");
}

std::vector<uint8_t> serialize_embeddings(const EmbeddingsFile& f) {
  validate_embeddings(f);
  std::vector<NamedTensor> tensors;
  for (const Slot& s : kSlots)
    if (present(f.*s.member)) tensors.push_back({s.name, &(f.*s.member)});
  for (const auto& [name, t] : f.extra) tensors.push_back({name, &t});
  std::map<std::string, std::string> meta = f.metadata;
  meta["format"] = kEmbeddingsFormat;
  return serialize_safetensors(tensors, meta);
}

void save_embeddings(const std::string& path, const EmbeddingsFile& f) {
  write_file_atomic(path, serialize_embeddings(f));
}

EmbeddingsFile load_embeddings(const std::string& path) {
  const SafetensorsFile st = SafetensorsFile::open(path);
  const auto fmt = st.metadata().find("format");
  if (fmt == st.metadata().end() || fmt->second != kEmbeddingsFormat)
    throw Error(Errc::corrupt_data, "'" + path + "' is not a fovea embeddings file (metadata format is '" +
                                        (fmt == st.metadata().end() ? std::string("none") : fmt->second) +
                                        "', expected '" + kEmbeddingsFormat + "')");
  EmbeddingsFile f;
  f.metadata = st.metadata();
  for (const SafetensorsFile::Entry& e : st.entries()) {
    Tensor* slot = nullptr;
    for (const Slot& s : kSlots)
      if (e.name == s.name) slot = &(f.*s.member);
    if (!e.dtype_known)
      throw Error(Errc::corrupt_data, "'" + path + "': tensor '" + e.name + "' has dtype " + e.dtype_name +
                                          ", which fovea does not read");
    if (slot)
      *slot = st.load(e);
    else
      f.extra.emplace(e.name, st.load(e));
  }
  try {
    validate_embeddings(f);
  } catch (const Error& e) {
    throw Error(Errc::corrupt_data, "'" + path + "': " + e.what());
  }
  return f;
}

}  // namespace fovea
