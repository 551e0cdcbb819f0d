// The codecs' shared parts: spec parsing and codebook files (the interface's checked
// encode/decode and state hash are in src/codec_interface).
#include <omp.h>

#include <charconv>
#include <cstring>

#include "compress/compress_internal.hpp"
#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"

namespace fovea {
namespace {

bool parse_int(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::vector<std::string> codec_spec_forms() {
  return {"fp16", "bf16", "int8", "pca:K", "pca:K+int8", "pq:M", "opq:M", "faiss:FACTORY"};
}

std::unique_ptr<Codec> make_codec(std::string_view spec, int64_t dim) {
  if (dim < 1 || dim > (int64_t(1) << 20)) throw invalid_argument("codec: dimension must be in [1, 1048576], got " + std::to_string(dim));
  if (spec == "fp16" || spec == "f16") return compress::make_float_codec(false, dim);
  if (spec == "bf16") return compress::make_float_codec(true, dim);
  if (spec == "int8" || spec == "sq8") return compress::make_int8_codec(dim);
  if (spec.starts_with("faiss:") && spec.size() > 6) return compress::make_faiss_codec(dim, std::string(spec.substr(6)));
  const size_t colon = spec.find(':');
  const std::string_view head = spec.substr(0, colon);
  if (colon != std::string_view::npos && (head == "pca" || head == "pq" || head == "opq")) {
    std::string_view arg = spec.substr(colon + 1);
    bool int8 = false;
    if (head == "pca" && arg.ends_with("+int8")) {
      int8 = true;
      arg.remove_suffix(5);
    }
    int64_t v = 0;
    if (!parse_int(arg, &v) || v < 1)
      throw invalid_argument("codec '" + std::string(spec) + "': " + std::string(head) + " needs a positive integer after ':'");
    if (head == "pca") {
      if (v > dim)
        throw invalid_argument("codec '" + std::string(spec) + "': cannot keep " + std::to_string(v) + " principal axes of " +
                  std::to_string(dim) + "-dimensional tokens");
      return compress::make_pca_codec(dim, v, int8);
    }
    if (dim % v != 0)
      throw invalid_argument("codec '" + std::string(spec) + "': " + std::to_string(v) + " sub-quantizers do not divide D = " +
                std::to_string(dim));
    return compress::make_pq_codec(dim, v, head == "opq");
  }
  std::string forms;
  for (const std::string& f : codec_spec_forms()) forms += (forms.empty() ? "" : ", ") + f;
  throw invalid_argument("unknown codec '" + std::string(spec) + "' (codecs: " + forms + ")");
}


void save_codebook(const Codec& codec, const std::string& path, const std::map<std::string, std::string>& extra) {
  if (!codec.trained()) throw invalid_argument("codec " + codec.spec() + " is not trained: no codebook to save");
  const auto state = codec.state();
  std::vector<NamedTensor> named;
  for (const auto& [name, t] : state) named.push_back({name, &t});
  std::map<std::string, std::string> meta = extra;
  meta["format"] = "fovea.codebook";
  meta["codec"] = codec.spec();
  meta["dim"] = std::to_string(codec.dim());
  meta["bytes_per_token"] = std::to_string(codec.bytes_per_token());
  meta["hash"] = codec.state_hash();
  save_safetensors(path, named, meta);
}

bool codec_uses_faiss_serialization(std::string_view spec) { return spec.starts_with("faiss:"); }

std::unique_ptr<Codec> load_codebook(const std::string& path, std::map<std::string, std::string>* metadata,
                                     const CodebookLoadOptions& options) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  const auto& meta = f.metadata();
  auto get = [&](const char* key) -> std::string {
    auto it = meta.find(key);
    if (it == meta.end())
      throw Error(Errc::corrupt_data, path + ": not a fovea codebook (no '" + key + "' in its metadata)");
    return it->second;
  };
  if (get("format") != "fovea.codebook")
    throw Error(Errc::corrupt_data, path + ": not a fovea codebook (format is '" + get("format") + "')");
  int64_t dim = 0;
  if (!parse_int(get("dim"), &dim) || dim < 1) throw Error(Errc::corrupt_data, path + ": bad 'dim' in its metadata");
  // Before make_codec: index_factory would already run on the file's factory string.
  if (codec_uses_faiss_serialization(get("codec")) && !options.trust_faiss)
    throw Error(Errc::unsupported,
                path + ": a " + get("codec") +
                    " codebook is FAISS's serialised index, which FAISS reads without checking it against damaged or "
                    "crafted files (they can crash or exhaust memory); load it only if you made it or trust its source "
                    "(--trust-faiss-codebook, CodebookLoadOptions::trust_faiss)");
  std::unique_ptr<Codec> c;
  try {
    c = make_codec(get("codec"), dim);
  } catch (const Error& e) {
    throw Error(Errc::corrupt_data, path + ": " + e.what());
  }
  std::vector<Tensor> tensors;
  tensors.reserve(f.entries().size());
  std::map<std::string, const Tensor*> by_name;
  for (const auto& e : f.entries()) {
    tensors.push_back(f.load(e));
    by_name[e.name] = &tensors.back();
  }
  try {
    c->load_state(by_name);
  } catch (const Error& e) {
    throw Error(Errc::corrupt_data, path + ": " + e.what());
  }
  if (c->state_hash() != get("hash"))
    throw Error(Errc::corrupt_data, path + ": its tensors do not match the hash in its metadata (edited or damaged)");
  if (metadata) *metadata = meta;
  return c;
}

namespace compress {

OmpThreads::OmpThreads(int threads) {
  saved_ = threads > 0 ? omp_get_max_threads() : 0;
  if (threads > 0) omp_set_num_threads(threads);
}

OmpThreads::~OmpThreads() {
  if (saved_ > 0) omp_set_num_threads(saved_);
}

const Tensor& state_tensor(const std::map<std::string, const Tensor*>& t, const std::string& name,
                           const std::vector<int64_t>& shape) {
  auto it = t.find(name);
  if (it == t.end() || !it->second) throw Error(Errc::corrupt_data, "codebook tensor '" + name + "' is missing");
  const Tensor& x = *it->second;
  if (x.dtype() != DType::f32 || x.shape() != shape) {
    std::string want;
    for (int64_t e : shape) want += (want.empty() ? "" : ", ") + std::to_string(e);
    throw Error(Errc::corrupt_data, "codebook tensor '" + name + "' must be F32 [" + want + "]");
  }
  return x;
}

void check_training(const Codec& c, const Tensor& x) {
  if (x.dtype() != DType::f32 || x.rank() != 2 || x.dim(1) != c.dim())
    throw invalid_argument("codec " + c.spec() + ": training vectors must be [n, " + std::to_string(c.dim()) + "] F32");
  if (x.dim(0) < c.min_train_vectors())
    throw Error(Errc::unsupported, "codec " + c.spec() + " needs at least " + std::to_string(c.min_train_vectors()) +
                                       " training vectors, got " + std::to_string(x.dim(0)) +
                                       " (add more with --train; " + std::to_string(c.recommended_train_vectors()) +
                                       " or more are recommended)");
}

}  // namespace compress
}  // namespace fovea
