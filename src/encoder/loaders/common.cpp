// What every loader shares: the two WeightSources, the Lookup, the JSON files beside the
// weights, and the input contracts (preprocessor_config.json and the families' defaults).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"
#include "fovea/gguf.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/torch_checkpoint.hpp"

namespace fovea::encoder_detail {

namespace {

// JSON beside a checkpoint, parsed with its nesting bounded: nlohmann's parser is iterative, but
// copying a value recurses once per level, so a config.json of 200,000 nested '[' overflowed
// the stack (SIGSEGV) when its vision part was copied. Real configs nest 3-4 levels.
// Discarded (is_discarded()) when malformed or deeper than 64 levels.
nlohmann::json parse_json_bounded(std::istream& in) {
  constexpr int kMaxDepth = 64;
  bool too_deep = false;
  nlohmann::json j = nlohmann::json::parse(
      in,
      [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        if (depth > kMaxDepth) too_deep = true;
        return !too_deep;  // stop keeping values once too deep (the parse then ends as discarded)
      },
      false);
  if (too_deep) return nlohmann::json(nlohmann::json::value_t::discarded);
  return j;
}

// Whether an entry's bytes are the tensor, row-major: always for safetensors; for a PyTorch
// checkpoint, unless it is a strided view.
bool dense(const SafetensorsFile::Entry&) { return true; }
bool dense(const TorchCheckpoint::Entry& e) { return e.contiguous; }

// The tensors of one mapped file (a safetensors file, a PyTorch checkpoint: the same entry
// interface). F32 and BF16 tensors that are dense and aligned are used where they lie.
template <typename File>
std::optional<WeightSource::Raw> raw_of(const File& f, std::string_view name) {
  const auto* e = f.find(name);
  if (!e || !e->dtype_known || (e->dtype != DType::f32 && e->dtype != DType::bf16) || !dense(*e)) return std::nullopt;
  const std::span<const std::byte> d = f.data(*e);
  // Neither format promises alignment: an odd offset would make a misaligned float pointer.
  if (reinterpret_cast<uintptr_t>(d.data()) % e->element_size) return std::nullopt;
  return WeightSource::Raw{d.data(), e->dtype};
}

template <typename File>
class FileSource final : public WeightSource {
 public:
  explicit FileSource(const File& f) : f_(f) {}
  const std::string& path() const override { return f_.path(); }
  std::optional<Info> info(std::string_view name) const override {
    const auto* e = f_.find(name);
    if (!e) return std::nullopt;
    return Info{e->shape, e->dtype_name};
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& e : f_.entries()) out.push_back(e.name);
    return out;
  }
  std::optional<std::string> type_problem(std::string_view name) const override {
    const auto* e = f_.find(name);
    if (e->dtype_name == "F32" || e->dtype_name == "F16" || e->dtype_name == "BF16" || e->dtype_name == "F64")
      return std::nullopt;
    return std::string(name) + " has dtype " + e->dtype_name + ", expected F32, F16, BF16 or F64";
  }
  Tensor load_f32(std::string_view name) const override {
    const auto* e = f_.find(name);
    if (!f16_in_place(*e)) return f_.load_f32(*e);
    Tensor out(DType::f32, e->shape);
    ggml_dequantize(uint32_t(GgmlType::f16), f_.data(*e).data(), out.numel(), out.data<float>());
    return out;
  }
  void load_f32_into(std::string_view name, float* dst) const override {
    const auto* e = f_.find(name);
    if (!f16_in_place(*e)) return WeightSource::load_f32_into(name, dst);
    int64_t n = 1;
    for (int64_t d : e->shape) n *= d;
    ggml_dequantize(uint32_t(GgmlType::f16), f_.data(*e).data(), n, dst);
  }
  std::optional<Raw> raw(std::string_view name) const override { return raw_of(f_, name); }

 private:
  // An F16 tensor decoded from where it lies (the vectorized decoder GGUF's F16 uses; exact, as
  // the element-wise one): no F16 copy of it first.
  static bool f16_in_place(const typename File::Entry& e) {
    return e.dtype_known && e.dtype == DType::f16 && dense(e) && e.element_size == 2;
  }
  const File& f_;
};
using SafetensorsSource = FileSource<SafetensorsFile>;
using TorchSource = FileSource<TorchCheckpoint>;  // .pt, .pth, pytorch_model.bin

class GgufSource final : public WeightSource {
 public:
  explicit GgufSource(const GgufFile& f) : f_(f) {}
  const std::string& path() const override { return f_.path(); }
  std::optional<Info> info(std::string_view name) const override {
    const auto* t = f_.find_tensor(name);
    if (!t) return std::nullopt;
    return Info{t->shape(), ggml_type_name(t->type)};
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& t : f_.tensors()) out.push_back(t.name);
    return out;
  }
  std::optional<std::string> type_problem(std::string_view name) const override {
    const auto* t = f_.find_tensor(name);
    if (ggml_type_supported(t->type)) return std::nullopt;
    return "unsupported GGUF tensor type " + ggml_type_name(t->type) + " in " + std::string(name) + " (fovea reads " +
           ggml_supported_types() + ")";
  }
  Tensor load_f32(std::string_view name) const override { return f_.load_f32(*f_.find_tensor(name)); }
  void load_f32_into(std::string_view name, float* dst) const override {
    const GgufTensorInfo* t = f_.find_tensor(name);
    const GgmlType type = GgmlType(t->type);
    if (type == GgmlType::f32 || type == GgmlType::bf16 || !ggml_dequantize(t->type, f_.data(*t).data(), t->numel(), dst))
      WeightSource::load_f32_into(name, dst);  // (and the error of a type it does not read)
  }
  std::optional<Raw> raw(std::string_view name) const override {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) return std::nullopt;
    const GgmlType type = GgmlType(t->type);
    // Q8_0 whose rows are whole blocks, as it lies (34 bytes a block, no alignment needed): the
    // GEMMs and the int8 quantizer decode its rows as they read them.
    if (type == GgmlType::q8_0) {
      const std::vector<int64_t> shape = t->shape();
      const std::span<const std::byte> d = f_.data(*t);
      if (shape.empty() || shape.back() % kQ8_0Block || d.size() != weight_bytes(kWeightQ8_0, t->numel()))
        return std::nullopt;
      return Raw{d.data(), kWeightQ8_0};
    }
    // F16 too: the GEMMs widen it as they read it (llama.cpp's mmproj files are mostly F16).
    if (type != GgmlType::f32 && type != GgmlType::bf16 && type != GgmlType::f16) return std::nullopt;
    const DType dt = type == GgmlType::f32 ? DType::f32 : type == GgmlType::bf16 ? DType::bf16 : DType::f16;
    const std::span<const std::byte> d = f_.data(*t);
    if (d.size() != size_t(t->numel()) * dtype_size(dt) || reinterpret_cast<uintptr_t>(d.data()) % dtype_size(dt))
      return std::nullopt;
    return Raw{d.data(), dt};
  }

 private:
  const GgufFile& f_;
};

// HF's sharded checkpoints: model.safetensors.index.json (or pytorch_model.bin.index.json) maps
// every tensor to a shard file in the same directory. Each shard is mapped (pages are read only
// for the tensors used); a shard is read as a PyTorch checkpoint when it starts like one.
class ShardedSource final : public WeightSource {
 public:
  explicit ShardedSource(const std::string& index_path) : path_(index_path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_regular_file(index_path, ec))  // (a FIFO would block the open below)
      throw Error(Errc::io, "cannot read '" + index_path + "': not a regular file");
    std::ifstream in(index_path, std::ios::binary);
    if (!in) throw Error(Errc::io, "cannot open '" + index_path + "'");
    const nlohmann::json j = parse_json_bounded(in);
    auto bad = [&](const std::string& why) { return Error(Errc::corrupt_data, "'" + index_path + "': " + why); };
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw bad("not a checkpoint index (a JSON object with a \"weight_map\")");
    const fs::path dir = fs::path(index_path).parent_path();
    std::map<std::string, size_t> shard_of_file;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) throw bad("weight_map[" + it.key() + "] is not a file name");
      const std::string file = it->get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos || file == "..")
        throw bad("shard name '" + file + "' is not a plain file name in the index's directory");
      auto [pos, fresh] = shard_of_file.emplace(file, shards_.size());
      if (fresh) {
        const std::string shard = (dir / file).string();
        if (looks_like_torch_checkpoint(shard)) {
          torch_.push_back(std::make_unique<TorchCheckpoint>(TorchCheckpoint::open(shard)));
          shards_.push_back(std::make_unique<TorchSource>(*torch_.back()));
        } else {
          st_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(shard)));
          shards_.push_back(std::make_unique<SafetensorsSource>(*st_.back()));
        }
      }
      if (!shards_[pos->second]->info(it.key()))
        throw bad("the index puts " + it.key() + " in " + file + ", which does not hold it");
      where_.emplace(it.key(), pos->second);
    }
  }
  const std::string& path() const override { return path_; }
  std::optional<Info> info(std::string_view name) const override {
    const WeightSource* s = shard(name);
    return s ? s->info(name) : std::nullopt;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [n, _] : where_) out.push_back(n);
    return out;
  }
  std::optional<std::string> type_problem(std::string_view name) const override { return shard(name)->type_problem(name); }
  Tensor load_f32(std::string_view name) const override { return shard(name)->load_f32(name); }
  void load_f32_into(std::string_view name, float* dst) const override { shard(name)->load_f32_into(name, dst); }
  std::optional<Raw> raw(std::string_view name) const override {
    const WeightSource* s = shard(name);
    return s ? s->raw(name) : std::nullopt;
  }

 private:
  const WeightSource* shard(std::string_view name) const {
    const auto it = where_.find(std::string(name));
    return it == where_.end() ? nullptr : shards_[it->second].get();
  }
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> st_;
  std::vector<std::unique_ptr<TorchCheckpoint>> torch_;
  std::vector<std::unique_ptr<WeightSource>> shards_;
  std::map<std::string, size_t> where_;
};

// Another source's tensors under `prefix`, named without it (a model inside a wrapper).
class PrefixSource final : public WeightSource {
 public:
  PrefixSource(const WeightSource& inner, std::string prefix) : inner_(inner), prefix_(std::move(prefix)) {
    map_weights = inner.map_weights;
  }
  const std::string& path() const override { return inner_.path(); }
  std::optional<Info> info(std::string_view name) const override { return inner_.info(full(name)); }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const std::string& n : inner_.names())
      if (n.size() > prefix_.size() && n.compare(0, prefix_.size(), prefix_) == 0) out.push_back(n.substr(prefix_.size()));
    return out;
  }
  std::optional<std::string> type_problem(std::string_view name) const override { return inner_.type_problem(full(name)); }
  Tensor load_f32(std::string_view name) const override { return inner_.load_f32(full(name)); }
  void load_f32_into(std::string_view name, float* dst) const override { inner_.load_f32_into(full(name), dst); }
  std::optional<Raw> raw(std::string_view name) const override { return inner_.raw(full(name)); }

 private:
  std::string full(std::string_view name) const { return prefix_ + std::string(name); }
  const WeightSource& inner_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<WeightSource> prefixed_source(const WeightSource& inner, const std::string& prefix) {
  return std::make_unique<PrefixSource>(inner, prefix);
}

std::vector<std::string> common_prefixes(const std::vector<std::string>& names, int components, size_t most) {
  std::map<std::string, size_t> count;
  for (const std::string& n : names) {
    size_t at = 0;
    int k = 0;
    while (k < components && (at = n.find('.', at)) != std::string::npos) ++at, ++k;
    if (k == components && at < n.size()) ++count[n.substr(0, at)];
  }
  std::vector<std::pair<size_t, std::string>> by;
  for (const auto& [p, c] : count)
    if (c >= 2) by.emplace_back(c, p);
  std::sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<std::string> out;
  for (size_t i = 0; i < by.size() && i < most; ++i) out.push_back(by[i].second);
  return out;
}

std::unique_ptr<WeightSource> sharded_safetensors_source(const std::string& index_path) {
  return std::make_unique<ShardedSource>(index_path);
}

std::unique_ptr<WeightSource> safetensors_source(const SafetensorsFile& f) { return std::make_unique<SafetensorsSource>(f); }
std::unique_ptr<WeightSource> gguf_source(const GgufFile& f) { return std::make_unique<GgufSource>(f); }
std::unique_ptr<WeightSource> torch_source(const TorchCheckpoint& f) { return std::make_unique<TorchSource>(f); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Tensor Lookup::get(const std::string& name, const std::vector<int64_t>& want, bool required, std::vector<int64_t> as) {
  const std::optional<WeightSource::Info> e = w_.info(name);
  if (!e) {
    if (required) missing_.push_back(name + " " + shape_str(want));
    return {};
  }
  used_.insert(name);
  if (e->shape != want) {
    problems_.push_back(name + " has shape " + shape_str(e->shape) + ", expected " + shape_str(want));
    return {};
  }
  if (std::optional<std::string> why = w_.type_problem(name)) {
    type_problems_.push_back(*why);
    return {};
  }
  // A tensor that cannot fit in this machine's memory as float32 is refused before allocating.
  unsigned __int128 elements = 1;
  for (int64_t d : e->shape) elements *= (unsigned __int128)uint64_t(d);
  const uint64_t ram = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
  if (elements * 4 > ram)
    throw Error(Errc::limit_exceeded, "'" + w_.path() + "': " + name + " " + shape_str(e->shape) + " needs " +
                                          std::to_string(uint64_t((elements * 4) >> 20)) +
                                          " MiB as float32, more than this machine's " + std::to_string(ram >> 20) +
                                          " MiB of memory");
  Tensor t = w_.load_f32(name);
  if (as.empty()) return t;
  Tensor r(DType::f32, as);
  std::memcpy(r.bytes(), t.bytes(), t.size_bytes());
  return r;
}

WeightMatrix Lookup::matrix(const std::string& name, const std::vector<int64_t>& want, bool required) {
  const std::optional<WeightSource::Info> e = w_.info(name);
  if (e && e->shape == want && want.size() == 2 && !w_.type_problem(name)) {
    if (const std::optional<WeightSource::Raw> r = w_.raw(name)) {
      used_.insert(name);
      // (MADV_POPULATE_READ on these pages was measured: no change in time or faults.)
      if (w_.map_weights) return WeightMatrix::view(r->data, r->dtype, want[0], want[1]);
      if (r->dtype == kWeightQ8_0) return decoded(name, want, required);  // owned copies are f32, bf16 or f16
      const unsigned __int128 bytes = (unsigned __int128)uint64_t(want[0]) * uint64_t(want[1]) * dtype_size(r->dtype);
      if (bytes <= uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE))) {  // else get() refuses it
        Tensor t(r->dtype, want);
        std::memcpy(t.bytes(), r->data, t.size_bytes());
        return WeightMatrix(std::move(t));
      }
    }
  }
  Tensor t = get(name, want, required);  // decodes (F16, Q8_0) or records the problem
  return present(t) ? WeightMatrix(std::move(t)) : WeightMatrix();
}

WeightMatrix Lookup::stacked(const std::vector<std::string>& names, int64_t rows, int64_t cols) {
  const std::vector<int64_t> want{rows, cols};
  bool all = true, all_same = true;
  std::vector<std::optional<WeightSource::Raw>> raws;
  for (const std::string& n : names) {
    const std::optional<WeightSource::Info> i = w_.info(n);
    all = all && i && i->shape == want && !w_.type_problem(n);
    raws.push_back(all ? w_.raw(n) : std::nullopt);
    all_same = all_same && raws.back() && raws.back()->dtype == raws.front()->dtype;
  }
  if (!all) {
    for (const std::string& n : names) get(n, want);  // records what is missing or wrong
    return {};
  }
  const DType dt = all_same ? raws.front()->dtype : DType::f32;
  const size_t part = weight_bytes(dt, rows * cols);
  if (dt == kWeightQ8_0) {  // whole blocks a row: the parts' bytes one after another are the stack
    WeightMatrix m;
    m.owned = Tensor(DType::u8, {int64_t(names.size() * part)});
    for (size_t j = 0; j < names.size(); ++j) {
      used_.insert(names[j]);
      std::memcpy(m.owned.bytes() + j * part, raws[j]->data, part);
    }
    m.data = m.owned.bytes(), m.dtype = dt, m.rows = int64_t(names.size()) * rows, m.cols = cols;
    return m;
  }
  Tensor t(dt, {int64_t(names.size()) * rows, cols});
  for (size_t j = 0; j < names.size(); ++j) {
    if (raws[j] && raws[j]->dtype == dt) {
      used_.insert(names[j]);
      std::memcpy(t.bytes() + j * part, raws[j]->data, part);
    } else {  // decoded straight into its part (dt is f32 here: the parts' types differ)
      used_.insert(names[j]);
      w_.load_f32_into(names[j], reinterpret_cast<float*>(t.bytes() + j * part));
    }
  }
  return WeightMatrix(std::move(t));
}

void Lookup::mark_used(const std::string& name) {
  if (has(name)) used_.insert(name);
}

void Lookup::finish(const std::string& what) const {
  if (missing_.empty() && problems_.empty() && type_problems_.empty()) return;
  std::string msg = "'" + w_.path() + "' is not a complete " + what + " checkpoint:";
  if (!missing_.empty()) {
    // The first few name the problem; a file missing thousands would make a megabyte line.
    constexpr size_t kListed = 12;
    msg += " missing " + std::to_string(missing_.size()) + " tensor(s): ";
    for (size_t i = 0; i < std::min(missing_.size(), kListed); ++i) msg += (i ? ", " : "") + missing_[i];
    if (missing_.size() > kListed) msg += " and " + std::to_string(missing_.size() - kListed) + " more";
    if (!problems_.empty() || !type_problems_.empty()) msg += ";";
  }
  std::vector<std::string> all = problems_;
  all.insert(all.end(), type_problems_.begin(), type_problems_.end());
  for (size_t i = 0; i < std::min<size_t>(all.size(), 12); ++i) msg += (i ? "; " : " ") + all[i];
  if (all.size() > 12) msg += "; and " + std::to_string(all.size() - 12) + " more";
  const bool only_types = missing_.empty() && problems_.empty();
  throw Error(only_types ? Errc::unsupported : Errc::corrupt_data, msg);
}

nlohmann::json read_json_beside(const std::string& weights_path, const char* file) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(weights_path).parent_path() / file;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return {};
  std::ifstream in(p, std::ios::binary);
  nlohmann::json j = parse_json_bounded(in);
  if (j.is_discarded() || !j.is_object())
    // (built with append: GCC 12 warns a false -Wrestrict on "'" + path here)
    throw Error(Errc::corrupt_data, std::string(1, '\'').append(p.string()).append("' is not a valid JSON object (or nests deeper than 64 levels)"));
  return j;
}

nlohmann::json vision_part(nlohmann::json j) {
  if (j.contains("model_type") && !j["model_type"].is_string() && !j["model_type"].is_null())
    throw Error(Errc::corrupt_data, "config.json: 'model_type' has the wrong type");
  if (j.contains("vision_config") && !j["vision_config"].is_object() && !j["vision_config"].is_null())
    throw Error(Errc::corrupt_data, "config.json: 'vision_config' is not an object");
  if (j.contains("vision_config") && j["vision_config"].is_object()) {
    nlohmann::json v = j["vision_config"];
    if (j.contains("projection_dim") && !v.contains("projection_dim")) v["projection_dim"] = j["projection_dim"];
    if (j.contains("model_type")) v["parent_model_type"] = j["model_type"];
    return v;
  }
  return j;
}

void check_agrees(const nlohmann::json& j, const char* file, std::initializer_list<const char*> keys, int64_t have,
                  const std::string& path, const std::string& whose) {
  if (const auto v = cfg_get<int64_t>(j, keys, file); v && *v != have)
    throw Error(Errc::corrupt_data, "'" + path + "': " + std::string(file) + " says " + std::string(*keys.begin()) + " = " +
                                        std::to_string(*v) + " but " + whose + " is " + std::to_string(have));
}

int default_heads(int hidden) {
  switch (hidden) {
    case 192: return 3;
    case 384: return 6;
    case 768: return 12;
    case 1024: return 16;
    case 1152: return 16;  // SigLIP so400m
    case 1280: return 16;  // ViT-H
    case 1408: return 16;  // ViT-g (timm vit_giant_patch14)
    case 1664: return 16;  // ViT-bigG
    default: return std::max(1, hidden / 64);
  }
}

Activation parse_hf_act(const std::string& s, const std::string& path) {
  if (s == "quick_gelu") return Activation::quick_gelu;
  if (s == "gelu_pytorch_tanh" || s == "gelu_new" || s == "gelu_tanh") return Activation::gelu_tanh;
  if (s == "gelu") return Activation::gelu_erf;
  throw Error(Errc::unsupported, "'" + path + "': config.json hidden_act '" + s +
                                     "' is not supported (quick_gelu, gelu, gelu_pytorch_tanh)");
}

int count_layers(const WeightSource& w, const std::string& prefix) {
  int n = 0;
  for (const std::string& name : w.names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos) continue;
    const std::string num = rest.substr(0, dot);
    if (num.size() > 6 || !std::all_of(num.begin(), num.end(), ::isdigit)) continue;
    // The loaders then look up every layer below the highest index: a single stray name such as
    // "blocks.999999.x" would ask for millions of tensors (a 2.7 GB, 45 s error message).
    const int index = std::stoi(num);
    if (index >= kMaxLayers)
      throw Error(Errc::limit_exceeded, "'" + w.path() + "': tensor " + name + " is layer " + std::to_string(index) +
                                            "; fovea runs at most " + std::to_string(kMaxLayers) + " layers");
    n = std::max(n, index + 1);
  }
  return n;
}

int checked_dim(int64_t v, int64_t max, const std::string& path, const std::string& what) {
  if (v < 1 || v > max)
    throw Error(Errc::limit_exceeded, "'" + path + "': " + what + " is " + std::to_string(v) +
                                          ", outside the encoder's range [1, " + std::to_string(max) + "]");
  return int(v);
}

int square_side(int64_t n, const std::string& path, const std::string& name) {
  const int64_t g = int64_t(std::llround(std::sqrt(double(std::max<int64_t>(n, 0)))));
  if (g > 4096) checked_dim(g, 4096, path, "the position grid's side (" + name + ")");
  if (g < 1 || g * g != n)
    throw Error(Errc::unsupported, "'" + path + "': " + name + " has " + std::to_string(n) +
                                       " positions, not a square grid");
  return int(g);
}

void patch_embedding_dims(const WeightSource& w, const std::string& name, VitConfig& c) {
  const std::string& path = w.path();
  const auto pe = w.info(name);
  if (pe->shape.size() != 4 || pe->shape[2] != pe->shape[3] || pe->shape[0] < 1)
    throw Error(Errc::corrupt_data, "'" + path + "': " + name + " has shape " + shape_str(pe->shape) +
                                        ", expected [D, C, P, P]");
  c.hidden = checked_dim(pe->shape[0], 1 << 16, path, "the hidden size (" + name + " dim 0)");
  c.channels = checked_dim(pe->shape[1], 16, path, "the channel count (" + name + " dim 1)");
  c.patch_px = checked_dim(pe->shape[2], 1024, path, "the patch size (" + name + " dim 2)");
}

void split_class_position(Tensor all, int64_t D, VitModel::Impl& m) {
  if (!present(all)) return;
  const int64_t cells = all.numel() / D - 1;
  m.class_pos = Tensor(DType::f32, {D});
  m.pos_grid = Tensor(DType::f32, {cells, D});
  std::memcpy(m.class_pos.bytes(), all.bytes(), size_t(D) * 4);
  std::memcpy(m.pos_grid.bytes(), all.bytes() + size_t(D) * 4, size_t(cells * D) * 4);
}

InputContract clip_defaults() {
  InputContract c;  // OPENAI_CLIP_MEAN / OPENAI_CLIP_STD
  c.source = "CLIP defaults (no preprocessor_config.json)";
  return c;
}
InputContract siglip_defaults() {
  InputContract c;  // SiglipImageProcessor: IMAGENET_STANDARD_MEAN / _STD
  c.mean = {0.5f, 0.5f, 0.5f};
  c.std = {0.5f, 0.5f, 0.5f};
  c.source = "SigLIP defaults 0.5/0.5 (no preprocessor_config.json)";
  return c;
}
InputContract imagenet_defaults() {
  InputContract c;  // torchvision's ViT weights' transforms: ImageNet mean / std
  c.mean = {0.485f, 0.456f, 0.406f};
  c.std = {0.229f, 0.224f, 0.225f};
  c.source = "torchvision ImageNet defaults";
  return c;
}

InputContract imagenet_contract(const std::string& source) {
  InputContract c = imagenet_defaults();
  c.source = source;
  return c;
}

InputContract contract_from_preprocessor(const nlohmann::json& pre, const InputContract& fallback, const char* file) {
  if (pre.is_null() || pre.empty()) return fallback;
  InputContract c = fallback;
  auto triple = [&](const char* key, std::array<float, 3>& out) {
    auto it = pre.find(key);
    if (it == pre.end() || it->is_null()) return;
    std::vector<double> v;
    if (it->is_number()) v.assign(3, it->get<double>());
    else if (it->is_array()) {
      for (const auto& x : *it) {
        if (!x.is_number()) throw Error(Errc::corrupt_data, std::string(file) + ": '" + key + "' must hold numbers");
        v.push_back(x.get<double>());
      }
      if (v.size() == 1) v.assign(3, v[0]);
    }
    if (v.size() != 3) throw Error(Errc::corrupt_data, std::string(file) + ": '" + key + "' must be 3 numbers (R, G, B)");
    for (int i = 0; i < 3; ++i) out[i] = float(v[i]);
  };
  triple("image_mean", c.mean);
  triple("image_std", c.std);
  for (float s : c.std)
    if (!(s > 0) || !std::isfinite(s)) throw Error(Errc::corrupt_data, std::string(file) + ": image_std values must be > 0");
  c.normalize = cfg_get<bool>(pre, {"do_normalize"}, file).value_or(true);
  const bool rescale = cfg_get<bool>(pre, {"do_rescale"}, file).value_or(true);
  c.rescale = rescale ? float(cfg_get<double>(pre, {"rescale_factor"}, file).value_or(1.0 / 255.0)) : 1.0f;
  if (!(c.rescale > 0) || !std::isfinite(c.rescale))
    throw Error(Errc::corrupt_data, std::string(file) + ": rescale_factor must be > 0");
  c.source = file;
  return c;
}

void fold_layer_scale(Lookup& L, const std::string& gamma, int64_t D, bool required, WeightMatrix& w, Tensor& b) {
  if (!required && !L.has(gamma)) return;
  const Tensor g = L.get(gamma, {D}, required);
  if (!present(g) || !present(w) || !present(b) || w.rows != D) return;
  Tensor t(DType::f32, {w.rows, w.cols});
  const float* gp = g.data<float>();
  float* bp = b.data<float>();
  for (int64_t r = 0; r < w.rows; ++r) {
    float* row = t.data<float>() + r * w.cols;
    weight_row_f32(w.data, w.dtype, w.cols, r, w.cols, row);
    for (int64_t k = 0; k < w.cols; ++k) row[k] *= gp[r];
    bp[r] *= gp[r];
  }
  w = WeightMatrix(std::move(t));
}

std::optional<std::string> shortest_prefix_of(const WeightSource& w, std::string_view suffix) {
  std::optional<std::string> best;
  for (const std::string& n : w.names())
    if (n.ends_with(suffix) && (!best || n.size() - suffix.size() < best->size()))
      best = n.substr(0, n.size() - suffix.size());
  return best;
}

void class_token_tower_dims(const WeightSource& w, const nlohmann::json& cfg, const std::string& pos_name,
                            const std::string& blocks, const std::string& fc1, VitConfig& c) {
  const std::string& path = w.path();
  const auto pos = w.info(pos_name);
  if (!pos || pos->shape.size() != 3)
    throw Error(Errc::corrupt_data, "'" + path + "': missing or malformed " + pos_name + " (expected [1, 1 + G·G, D])");
  c.grid = square_side(pos->shape[1] - 1, path, pos_name);
  c.layers = count_layers(w, blocks);
  c.layers_in_checkpoint = c.layers;
  const auto f = w.info(blocks + "0." + fc1 + ".weight");
  c.mlp = f && f->shape.size() == 2 ? checked_dim(f->shape[0], 1 << 20, path, "the MLP width") : 4 * c.hidden;
  c.heads = cfg_get<int>(cfg, {"num_attention_heads"}).value_or(default_heads(c.hidden));
}

VitLayer load_fused_block(Lookup& L, const std::string& l, const FusedBlockNames& n, const VitConfig& c) {
  const int64_t D = c.hidden, M = c.mlp, M1 = fc1_width(c);
  const std::string ln1 = l + n.ln1, out = l + n.out, ln2 = l + n.ln2, fc1 = l + n.fc1, fc2 = l + n.fc2;
  VitLayer ly;
  ly.ln1_w = L.get(ln1 + ".weight", {D});
  ly.ln1_b = L.get(ln1 + ".bias", {D});
  ly.qkv_w = L.matrix(l + n.qkv_w, {3 * D, D});
  if (n.qkv_b) ly.qkv_b = L.get(l + n.qkv_b, {3 * D});
  ly.out_w = L.matrix(out + ".weight", {D, D});
  ly.out_b = L.get(out + ".bias", {D});
  ly.ln2_w = L.get(ln2 + ".weight", {D});
  ly.ln2_b = L.get(ln2 + ".bias", {D});
  ly.fc1_w = L.matrix(fc1 + ".weight", {M1, D});
  ly.fc1_b = L.get(fc1 + ".bias", {M1});
  ly.fc2_w = L.matrix(fc2 + ".weight", {D, M});
  ly.fc2_b = L.get(fc2 + ".bias", {D});
  if (n.ls1) fold_layer_scale(L, l + n.ls1, D, n.ls_required, ly.out_w, ly.out_b);
  if (n.ls2) fold_layer_scale(L, l + n.ls2, D, n.ls_required, ly.fc2_w, ly.fc2_b);
  return ly;
}

}  // namespace fovea::encoder_detail
