// Loading a ViT: naming detection, config.json, one tensor lookup that collects every problem,
// and seeded random models.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "encoder/encoder_internal.hpp"
#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"

namespace fovea {
using encoder_detail::present;

std::string_view to_string(VitFamily f) {
  switch (f) {
    case VitFamily::clip: return "clip";
    case VitFamily::siglip: return "siglip";
    case VitFamily::torchvision: return "torchvision";
  }
  return "?";
}
std::string_view to_string(Activation a) {
  switch (a) {
    case Activation::quick_gelu: return "quick_gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::gelu_erf: return "gelu";
  }
  return "?";
}
std::string_view to_string(Precision p) { return p == Precision::fp32 ? "fp32" : "bf16"; }

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The one place tensors are taken from a checkpoint: each get() checks presence, dtype and
// shape; problems are collected so that a bad file is reported in full, once.
class Lookup {
 public:
  explicit Lookup(const SafetensorsFile& f) : f_(f) {}

  bool has(const std::string& name) const { return f_.find(name) != nullptr; }

  // Returns the tensor converted to f32 with shape `as` (same element count as `want`, which is
  // the shape the file must have). Missing optional tensors give an empty Tensor.
  Tensor get(const std::string& name, const std::vector<int64_t>& want, bool required = true,
             std::vector<int64_t> as = {}) {
    const SafetensorsFile::Entry* e = f_.find(name);
    if (!e) {
      if (required) missing_.push_back(name + " " + shape_str(want));
      return {};
    }
    used_.insert(name);
    if (e->shape != want) {
      problems_.push_back(name + " has shape " + shape_str(e->shape) + ", expected " + shape_str(want));
      return {};
    }
    if (e->dtype_name != "F32" && e->dtype_name != "F16" && e->dtype_name != "BF16") {
      problems_.push_back(name + " has dtype " + e->dtype_name + ", expected F32, F16 or BF16");
      return {};
    }
    // A tensor that cannot fit in this machine's memory as float32 is refused before allocating.
    const unsigned __int128 f32_bytes = (unsigned __int128)uint64_t(e->numel()) * 4;
    const uint64_t ram = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
    if (f32_bytes > ram)
      throw Error(Errc::limit_exceeded, "'" + f_.path() + "': " + name + " " + shape_str(e->shape) + " needs " +
                                            std::to_string(uint64_t(f32_bytes >> 20)) + " MiB as float32, more than this machine's " +
                                            std::to_string(ram >> 20) + " MiB of memory");
    Tensor t(DType::f32, as.empty() ? want : as);
    const std::span<const std::byte> raw = f_.data(*e);
    float* dst = t.data<float>();
    const int64_t n = t.numel();
    if (e->dtype_name == "F32") {
      std::memcpy(dst, raw.data(), size_t(n) * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        dst[i] = e->dtype_name == "F16" ? f16_to_f32(h) : bf16_to_f32(h);
      }
    }
    return t;
  }

  void mark_used(const std::string& name) {
    if (has(name)) used_.insert(name);
  }

  // Throws Error(corrupt_data) naming every missing or mis-shaped tensor.
  void finish(const std::string& what) const {
    if (missing_.empty() && problems_.empty()) return;
    std::string msg = "'" + f_.path() + "' is not a complete " + what + " checkpoint:";
    if (!missing_.empty()) {
      msg += " missing " + std::to_string(missing_.size()) + " tensor(s): ";
      for (size_t i = 0; i < missing_.size(); ++i) msg += (i ? ", " : "") + missing_[i];
      if (!problems_.empty()) msg += ";";
    }
    for (size_t i = 0; i < problems_.size(); ++i) msg += (i ? "; " : " ") + problems_[i];
    throw Error(Errc::corrupt_data, msg);
  }

  int used() const { return int(used_.size()); }

 private:
  const SafetensorsFile& f_;
  std::vector<std::string> missing_, problems_;
  std::set<std::string> used_;
};

// config.json beside the checkpoint, reduced to the vision tower's settings; {} when absent.
nlohmann::json read_config(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path cfg = fs::path(path).parent_path() / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec)) return {};
  std::ifstream in(cfg, std::ios::binary);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw Error(Errc::corrupt_data, std::string(1, '\'').append(cfg.string()).append("' is not a valid JSON object"));
  if (j.contains("vision_config") && j["vision_config"].is_object()) {
    nlohmann::json v = j["vision_config"];
    if (j.contains("projection_dim") && !v.contains("projection_dim")) v["projection_dim"] = j["projection_dim"];
    if (j.contains("model_type")) v["parent_model_type"] = j["model_type"];
    return v;
  }
  return j;
}

template <typename T>
std::optional<T> cfg_get(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    try {
      return it->get<T>();
    } catch (const nlohmann::json::exception&) {
      throw Error(Errc::corrupt_data, std::string("config.json: '") + k + "' has the wrong type");
    }
  }
  return std::nullopt;
}

int default_heads(int hidden) {
  switch (hidden) {
    case 192: return 3;
    case 384: return 6;
    case 768: return 12;
    case 1024: return 16;
    case 1152: return 16;  // SigLIP so400m
    case 1280: return 16;  // ViT-H
    case 1664: return 16;  // ViT-bigG
    default: return std::max(1, hidden / 64);
  }
}

Activation parse_act(const std::string& s, const std::string& path) {
  if (s == "quick_gelu") return Activation::quick_gelu;
  if (s == "gelu_pytorch_tanh" || s == "gelu_new" || s == "gelu_tanh") return Activation::gelu_tanh;
  if (s == "gelu") return Activation::gelu_erf;
  throw Error(Errc::unsupported, "'" + path + "': config.json hidden_act '" + s + "' is not supported (quick_gelu, gelu, gelu_pytorch_tanh)");
}

int count_layers(const SafetensorsFile& f, const std::string& prefix) {
  int n = 0;
  for (const auto& e : f.entries()) {
    if (e.name.rfind(prefix, 0) != 0) continue;
    const std::string rest = e.name.substr(prefix.size());
    size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos) continue;
    const std::string num = rest.substr(0, dot);
    if (!std::all_of(num.begin(), num.end(), ::isdigit) || num.size() > 6) continue;
    n = std::max(n, std::stoi(num) + 1);
  }
  return n;
}

// A dimension read from a tensor's shape, before it is used as an int and before anything is
// allocated: a hostile or broken checkpoint (e.g. a sparse file claiming 2^40 elements) gets a
// clear error instead of a wrapped size or a huge allocation.
int checked_dim(int64_t v, int64_t max, const std::string& path, const std::string& what) {
  if (v < 1 || v > max)
    throw Error(Errc::limit_exceeded, "'" + path + "': " + what + " is " + std::to_string(v) +
                                          ", outside the encoder's range [1, " + std::to_string(max) + "]");
  return int(v);
}

int square_side(int64_t n, const std::string& path, const std::string& name) {
  const int64_t g = int64_t(std::llround(std::sqrt(double(n))));
  if (g > 4096) checked_dim(g, 4096, path, "the position grid's side (" + name + ")");
  if (g < 1 || g * g != n)
    throw Error(Errc::unsupported, "'" + path + "': " + name + " has " + std::to_string(n) +
                                       " positions, not a square grid");
  return int(g);
}

std::shared_ptr<VitModel::Impl> load_hf(const SafetensorsFile& f, const std::string& prefix,
                                        const nlohmann::json& cfg) {
  auto m = std::make_shared<VitModel::Impl>();
  VitConfig& c = m->config;
  const std::string p = prefix;
  const std::string root = prefix.size() >= 13 && prefix.ends_with("vision_model.") ? prefix.substr(0, prefix.size() - 13) : "";
  const auto* pe = f.find(p + "embeddings.patch_embedding.weight");
  if (pe->shape.size() != 4 || pe->shape[2] != pe->shape[3] || pe->shape[0] < 1)
    throw Error(Errc::corrupt_data, "'" + f.path() + "': " + pe->name + " has shape " + shape_str(pe->shape) +
                                        ", expected [D, C, P, P]");
  const bool has_class = f.find(p + "embeddings.class_embedding") != nullptr;
  std::string mt = cfg_get<std::string>(cfg, {"model_type"}).value_or("");
  if (mt.empty()) mt = cfg_get<std::string>(cfg, {"parent_model_type"}).value_or("");
  const bool cfg_siglip = mt.find("siglip") != std::string::npos;
  const bool cfg_clip = mt.find("clip") != std::string::npos;
  if ((cfg_siglip && has_class) || (cfg_clip && !has_class))
    throw Error(Errc::corrupt_data, "'" + f.path() + "': config.json says model_type '" + mt + "' but the tensors " +
                                        (has_class ? "have" : "have no") + " class embedding");
  c.family = has_class ? VitFamily::clip : VitFamily::siglip;
  c.hidden = checked_dim(pe->shape[0], 1 << 16, f.path(), "the hidden size (" + pe->name + " dim 0)");
  c.channels = checked_dim(pe->shape[1], 16, f.path(), "the channel count (" + pe->name + " dim 1)");
  c.patch_px = checked_dim(pe->shape[2], 1024, f.path(), "the patch size (" + pe->name + " dim 2)");
  const int64_t D = c.hidden;
  const auto* pos = f.find(p + "embeddings.position_embedding.weight");
  if (!pos || pos->shape.size() != 2)
    throw Error(Errc::corrupt_data, "'" + f.path() + "': missing or malformed " + p + "embeddings.position_embedding.weight");
  c.grid = square_side(pos->shape[0] - (has_class ? 1 : 0), f.path(), pos->name);
  c.layers = count_layers(f, p + "encoder.layers.");
  const auto* fc1 = f.find(p + "encoder.layers.0.mlp.fc1.weight");
  c.mlp = fc1 && fc1->shape.size() == 2 ? checked_dim(fc1->shape[0], 1 << 20, f.path(), "the MLP width (" + fc1->name + " dim 0)")
                                        : 4 * c.hidden;
  c.heads = cfg_get<int>(cfg, {"num_attention_heads"}).value_or(default_heads(c.hidden));
  c.class_token = has_class;
  c.patch_bias = !has_class;
  c.pre_norm = has_class;
  c.final_norm = has_class ? FinalNorm::pooled_only : FinalNorm::all_tokens;
  c.act = has_class ? Activation::quick_gelu : Activation::gelu_tanh;
  c.ln_eps = has_class ? 1e-5f : 1e-6f;
  if (auto a = cfg_get<std::string>(cfg, {"hidden_act"})) c.act = parse_act(*a, f.path());
  if (auto e = cfg_get<double>(cfg, {"layer_norm_eps"})) c.ln_eps = float(*e);
  // Shapes win over config.json; a disagreement is a mismatched pair of files.
  auto check = [&](const char* key, int have) {
    if (auto v = cfg_get<int>(cfg, {key}); v && *v != have)
      throw Error(Errc::corrupt_data, "'" + f.path() + "': config.json " + key + " = " + std::to_string(*v) +
                                          " but the tensors say " + std::to_string(have));
  };
  check("hidden_size", c.hidden);
  check("patch_size", c.patch_px);
  check("num_hidden_layers", c.layers);
  check("intermediate_size", c.mlp);
  check("image_size", c.grid * c.patch_px);
  if (c.layers < 1) throw Error(Errc::corrupt_data, "'" + f.path() + "': no " + p + "encoder.layers.N tensors");
  if (c.heads < 1 || D % c.heads != 0)
    throw Error(Errc::corrupt_data, "'" + f.path() + "': hidden size " + std::to_string(D) + " is not divisible by " +
                                        std::to_string(c.heads) + " heads");
  const int64_t M = c.mlp, C = c.channels, P = c.patch_px, G = c.grid;

  Lookup L(f);
  m->patch_w = L.get(p + "embeddings.patch_embedding.weight", {D, C, P, P}, true, {D, C * P * P});
  if (c.patch_bias) m->patch_b = L.get(p + "embeddings.patch_embedding.bias", {D});
  if (has_class) {
    m->class_emb = L.get(p + "embeddings.class_embedding", {D});
    Tensor all = L.get(p + "embeddings.position_embedding.weight", {G * G + 1, D});
    if (present(all)) {
      m->class_pos = Tensor(DType::f32, {D});
      m->pos_grid = Tensor(DType::f32, {G * G, D});
      std::memcpy(m->class_pos.bytes(), all.bytes(), size_t(D) * 4);
      std::memcpy(m->pos_grid.bytes(), all.bytes() + size_t(D) * 4, size_t(G * G * D) * 4);
    }
    m->pre_w = L.get(p + "pre_layrnorm.weight", {D});
    m->pre_b = L.get(p + "pre_layrnorm.bias", {D});
  } else {
    m->pos_grid = L.get(p + "embeddings.position_embedding.weight", {G * G, D});
  }
  L.mark_used(p + "embeddings.position_ids");
  for (int i = 0; i < c.layers; ++i) {
    const std::string l = p + "encoder.layers." + std::to_string(i) + ".";
    VitLayer ly;
    ly.ln1_w = L.get(l + "layer_norm1.weight", {D});
    ly.ln1_b = L.get(l + "layer_norm1.bias", {D});
    ly.qkv_w = Tensor(DType::f32, {3 * D, D});
    ly.qkv_b = Tensor(DType::f32, {3 * D});
    const char* names[3] = {"q_proj", "k_proj", "v_proj"};
    for (int j = 0; j < 3; ++j) {
      Tensor w = L.get(l + "self_attn." + names[j] + ".weight", {D, D});
      Tensor b = L.get(l + "self_attn." + names[j] + ".bias", {D});
      if (present(w)) std::memcpy(ly.qkv_w.bytes() + size_t(j * D * D) * 4, w.bytes(), size_t(D * D) * 4);
      if (present(b)) std::memcpy(ly.qkv_b.bytes() + size_t(j * D) * 4, b.bytes(), size_t(D) * 4);
    }
    ly.out_w = L.get(l + "self_attn.out_proj.weight", {D, D});
    ly.out_b = L.get(l + "self_attn.out_proj.bias", {D});
    ly.ln2_w = L.get(l + "layer_norm2.weight", {D});
    ly.ln2_b = L.get(l + "layer_norm2.bias", {D});
    ly.fc1_w = L.get(l + "mlp.fc1.weight", {M, D});
    ly.fc1_b = L.get(l + "mlp.fc1.bias", {M});
    ly.fc2_w = L.get(l + "mlp.fc2.weight", {D, M});
    ly.fc2_b = L.get(l + "mlp.fc2.bias", {D});
    m->layers.push_back(std::move(ly));
  }
  m->post_w = L.get(p + "post_layernorm.weight", {D});
  m->post_b = L.get(p + "post_layernorm.bias", {D});
  if (has_class) {
    if (const auto* pj = f.find(root + "visual_projection.weight"); pj && pj->shape.size() == 2) {
      c.projection_dim = int(pj->shape[0]);
      m->proj_w = L.get(root + "visual_projection.weight", {pj->shape[0], D});
    }
  } else if (std::any_of(f.entries().begin(), f.entries().end(),
                         [&](const SafetensorsFile::Entry& e) { return e.name.rfind(p + "head.", 0) == 0; })) {
    // Any head tensor means the checkpoint has the pooling head: then all of it is required.
    c.attention_pool = true;
    const std::string h = p + "head.";
    m->pool_probe = L.get(h + "probe", {1, 1, D}, true, {D});
    m->pool_in_w = L.get(h + "attention.in_proj_weight", {3 * D, D});
    m->pool_in_b = L.get(h + "attention.in_proj_bias", {3 * D});
    m->pool_out_w = L.get(h + "attention.out_proj.weight", {D, D});
    m->pool_out_b = L.get(h + "attention.out_proj.bias", {D});
    m->pool_ln_w = L.get(h + "layernorm.weight", {D});
    m->pool_ln_b = L.get(h + "layernorm.bias", {D});
    m->pool_fc1_w = L.get(h + "mlp.fc1.weight", {M, D});
    m->pool_fc1_b = L.get(h + "mlp.fc1.bias", {M});
    m->pool_fc2_w = L.get(h + "mlp.fc2.weight", {D, M});
    m->pool_fc2_b = L.get(h + "mlp.fc2.bias", {D});
  }
  L.finish(has_class ? "HF CLIP vision" : "HF SigLIP vision");
  m->tensors_used = L.used();
  return m;
}

std::shared_ptr<VitModel::Impl> load_torchvision(const SafetensorsFile& f, const nlohmann::json& cfg) {
  auto m = std::make_shared<VitModel::Impl>();
  VitConfig& c = m->config;
  const auto* pe = f.find("conv_proj.weight");
  if (pe->shape.size() != 4 || pe->shape[2] != pe->shape[3] || pe->shape[0] < 1)
    throw Error(Errc::corrupt_data, "'" + f.path() + "': conv_proj.weight has shape " + shape_str(pe->shape) +
                                        ", expected [D, C, P, P]");
  c.family = VitFamily::torchvision;
  c.hidden = checked_dim(pe->shape[0], 1 << 16, f.path(), "the hidden size (" + pe->name + " dim 0)");
  c.channels = checked_dim(pe->shape[1], 16, f.path(), "the channel count (" + pe->name + " dim 1)");
  c.patch_px = checked_dim(pe->shape[2], 1024, f.path(), "the patch size (" + pe->name + " dim 2)");
  const auto* pos = f.find("encoder.pos_embedding");
  if (!pos || pos->shape.size() != 3)
    throw Error(Errc::corrupt_data, "'" + f.path() + "': missing or malformed encoder.pos_embedding");
  c.grid = square_side(pos->shape[1] - 1, f.path(), "encoder.pos_embedding");
  c.layers = count_layers(f, "encoder.layers.encoder_layer_");
  const bool legacy_mlp = f.find("encoder.layers.encoder_layer_0.mlp.linear_1.weight") != nullptr;
  const std::string fc1n = legacy_mlp ? "mlp.linear_1." : "mlp.0.", fc2n = legacy_mlp ? "mlp.linear_2." : "mlp.3.";
  const auto* fc1 = f.find("encoder.layers.encoder_layer_0." + fc1n + "weight");
  c.mlp = fc1 && fc1->shape.size() == 2 ? checked_dim(fc1->shape[0], 1 << 20, f.path(), "the MLP width (" + fc1->name + " dim 0)")
                                        : 4 * c.hidden;
  c.heads = cfg_get<int>(cfg, {"num_heads", "num_attention_heads"}).value_or(default_heads(c.hidden));
  c.class_token = true;
  c.patch_bias = true;
  c.pre_norm = false;
  c.final_norm = FinalNorm::all_tokens;
  c.act = Activation::gelu_erf;
  c.ln_eps = 1e-6f;
  if (c.layers < 1) throw Error(Errc::corrupt_data, "'" + f.path() + "': no encoder.layers.encoder_layer_N tensors");
  if (c.heads < 1 || c.hidden % c.heads != 0)
    throw Error(Errc::corrupt_data, "'" + f.path() + "': hidden size " + std::to_string(c.hidden) +
                                        " is not divisible by " + std::to_string(c.heads) + " heads");
  const int64_t D = c.hidden, M = c.mlp, C = c.channels, P = c.patch_px, G = c.grid;
  Lookup L(f);
  m->patch_w = L.get("conv_proj.weight", {D, C, P, P}, true, {D, C * P * P});
  m->patch_b = L.get("conv_proj.bias", {D});
  m->class_emb = L.get("class_token", {1, 1, D}, true, {D});
  Tensor all = L.get("encoder.pos_embedding", {1, G * G + 1, D});
  if (present(all)) {
    m->class_pos = Tensor(DType::f32, {D});
    m->pos_grid = Tensor(DType::f32, {G * G, D});
    std::memcpy(m->class_pos.bytes(), all.bytes(), size_t(D) * 4);
    std::memcpy(m->pos_grid.bytes(), all.bytes() + size_t(D) * 4, size_t(G * G * D) * 4);
  }
  for (int i = 0; i < c.layers; ++i) {
    const std::string l = "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
    VitLayer ly;
    ly.ln1_w = L.get(l + "ln_1.weight", {D});
    ly.ln1_b = L.get(l + "ln_1.bias", {D});
    ly.qkv_w = L.get(l + "self_attention.in_proj_weight", {3 * D, D});
    ly.qkv_b = L.get(l + "self_attention.in_proj_bias", {3 * D});
    ly.out_w = L.get(l + "self_attention.out_proj.weight", {D, D});
    ly.out_b = L.get(l + "self_attention.out_proj.bias", {D});
    ly.ln2_w = L.get(l + "ln_2.weight", {D});
    ly.ln2_b = L.get(l + "ln_2.bias", {D});
    ly.fc1_w = L.get(l + fc1n + "weight", {M, D});
    ly.fc1_b = L.get(l + fc1n + "bias", {M});
    ly.fc2_w = L.get(l + fc2n + "weight", {D, M});
    ly.fc2_b = L.get(l + fc2n + "bias", {D});
    m->layers.push_back(std::move(ly));
  }
  m->post_w = L.get("encoder.ln.weight", {D});
  m->post_b = L.get("encoder.ln.bias", {D});
  if (!L.has("heads.pre_logits.weight")) {
    if (const auto* hw = f.find("heads.head.weight"); hw && hw->shape.size() == 2) {
      c.num_classes = int(hw->shape[0]);
      m->head_w = L.get("heads.head.weight", {hw->shape[0], D});
      m->head_b = L.get("heads.head.bias", {hw->shape[0]});
    }
  }
  L.finish("torchvision VisionTransformer");
  m->tensors_used = L.used();
  return m;
}

// A small, fast, seeded generator: splitmix64 into uniform floats.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform with standard deviation `std`.
  float uniform(float std) { return (float(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * std * 1.7320508f; }
};

Tensor random_tensor(std::vector<int64_t> shape, Rng& rng, float std, float mean = 0) {
  Tensor t(DType::f32, std::move(shape));
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = mean + rng.uniform(std);
  return t;
}

}  // namespace

VitModel VitModel::random(const VitConfig& config, uint64_t seed, const std::string& name) {
  const VitConfig& c = config;
  if (c.hidden < 1 || c.heads < 1 || c.hidden % c.heads || c.layers < 1 || c.mlp < 1 || c.grid < 1 || c.patch_px < 2)
    throw Error(Errc::invalid_argument, "random ViT: inconsistent dimensions");
  auto m = std::make_shared<Impl>();
  m->config = config;
  m->source = name;
  m->random = true;
  Rng rng{seed};
  const int64_t D = c.hidden, M = c.mlp, G = c.grid, K = int64_t(c.channels) * c.patch_px * c.patch_px;
  m->patch_w = random_tensor({D, K}, rng, 0.02f);
  if (c.patch_bias) m->patch_b = random_tensor({D}, rng, 0.02f);
  if (c.class_token) {
    m->class_emb = random_tensor({D}, rng, 0.02f);
    m->class_pos = random_tensor({D}, rng, 0.02f);
  }
  m->pos_grid = random_tensor({G * G, D}, rng, 0.02f);
  if (c.pre_norm) {
    m->pre_w = random_tensor({D}, rng, 0.02f, 1.0f);
    m->pre_b = random_tensor({D}, rng, 0.02f);
  }
  for (int i = 0; i < c.layers; ++i) {
    VitLayer ly;
    ly.ln1_w = random_tensor({D}, rng, 0.02f, 1.0f);
    ly.ln1_b = random_tensor({D}, rng, 0.02f);
    ly.qkv_w = random_tensor({3 * D, D}, rng, 0.02f);
    ly.qkv_b = random_tensor({3 * D}, rng, 0.02f);
    ly.out_w = random_tensor({D, D}, rng, 0.02f);
    ly.out_b = random_tensor({D}, rng, 0.02f);
    ly.ln2_w = random_tensor({D}, rng, 0.02f, 1.0f);
    ly.ln2_b = random_tensor({D}, rng, 0.02f);
    ly.fc1_w = random_tensor({M, D}, rng, 0.02f);
    ly.fc1_b = random_tensor({M}, rng, 0.02f);
    ly.fc2_w = random_tensor({D, M}, rng, 0.02f);
    ly.fc2_b = random_tensor({D}, rng, 0.02f);
    m->layers.push_back(std::move(ly));
  }
  if (c.final_norm != FinalNorm::none) {
    m->post_w = random_tensor({D}, rng, 0.02f, 1.0f);
    m->post_b = random_tensor({D}, rng, 0.02f);
  }
  if (c.projection_dim > 0) m->proj_w = random_tensor({c.projection_dim, D}, rng, 0.02f);
  VitModel out;
  out.impl_ = std::move(m);
  return out;
}

VitModel VitModel::load(const std::string& spec) {
  if (spec.rfind("random:", 0) == 0) {
    std::string rest = spec.substr(7);
    uint64_t seed = 0;
    if (const size_t colon = rest.find(':'); colon != std::string::npos) {
      const std::string s = rest.substr(colon + 1);
      if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), ::isdigit))
        throw Error(Errc::invalid_argument, "--model " + spec + ": the seed must be a decimal number");
      seed = std::stoull(s);
      rest = rest.substr(0, colon);
    }
    VitConfig c;  // CLIP-shaped: the tokenizer normalises with CLIP's mean and std
    if (rest == "vit-b16") {
      c.hidden = 768, c.heads = 12, c.mlp = 3072;
    } else if (rest == "vit-s16") {
      c.hidden = 384, c.heads = 6, c.mlp = 1536;
    } else if (rest == "vit-tiny") {  // for tests
      c.hidden = 64, c.heads = 4, c.mlp = 128, c.layers = 2, c.grid = 4;
    } else {
      throw Error(Errc::invalid_argument, "--model " + spec + ": unknown random model (random:vit-b16, random:vit-s16)");
    }
    c.pre_norm = true;
    return random(c, seed, spec);
  }
  SafetensorsFile f = SafetensorsFile::open(spec);
  const nlohmann::json cfg = read_config(spec);
  std::shared_ptr<Impl> m;
  std::string hf_prefix;
  bool hf = false;
  const std::string kPe = "embeddings.patch_embedding.weight";
  // The vision tower's prefix: "vision_model." normally, longer inside a VLM checkpoint.
  for (const auto& e : f.entries()) {
    if (!e.name.ends_with(kPe)) continue;
    const std::string pre = e.name.substr(0, e.name.size() - kPe.size());
    const bool better = !hf || (pre.ends_with("vision_model.") && !hf_prefix.ends_with("vision_model.")) ||
                        (pre.ends_with("vision_model.") == hf_prefix.ends_with("vision_model.") && pre.size() < hf_prefix.size());
    if (better) hf_prefix = pre;
    hf = true;
  }
  if (f.find("conv_proj.weight")) {
    m = load_torchvision(f, cfg);
  } else if (hf) {
    m = load_hf(f, hf_prefix, cfg);
  } else {
    throw Error(Errc::unsupported,
                "'" + spec + "': no ViT naming recognised (expected vision_model.embeddings.patch_embedding.weight "
                "for HF CLIP/SigLIP, or conv_proj.weight for torchvision)");
  }
  m->source = spec;
  m->tensors_ignored = int(f.entries().size()) - m->tensors_used;
  VitModel out;
  out.impl_ = std::move(m);
  return out;
}

const VitConfig& VitModel::config() const { return impl_->config; }
const std::string& VitModel::source() const { return impl_->source; }
bool VitModel::is_random() const { return impl_->random; }
int VitModel::tensors_used() const { return impl_->tensors_used; }
int VitModel::tensors_ignored() const { return impl_->tensors_ignored; }

std::string VitModel::describe() const {
  const VitConfig& c = impl_->config;
  std::string s = impl_->random ? "RANDOM WEIGHTS (benchmark only, meaningless embeddings) " : "";
  s += std::string(to_string(c.family)) + " ViT D=" + std::to_string(c.hidden) + " L=" + std::to_string(c.layers) +
       " H=" + std::to_string(c.heads) + " MLP=" + std::to_string(c.mlp) + " P=" + std::to_string(c.patch_px) +
       " G=" + std::to_string(c.grid) + " act=" + std::string(to_string(c.act)) + " (" + impl_->source + ")";
  return s;
}

}  // namespace fovea
