// Loading a ViT: the file's format decides the WeightSource, the first loader that accepts the
// checkpoint loads it (src/encoder/loaders/), and seeded random models.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/gguf.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/torch_checkpoint.hpp"
#include "io/file_kind.hpp"

namespace fovea {
using encoder_detail::present;

std::string_view to_string(PositionSampling s) {
  switch (s) {
    case PositionSampling::bicubic: return "bicubic";
    case PositionSampling::bilinear: return "bilinear";
    case PositionSampling::bicubic_antialias: return "bicubic_antialias";
    case PositionSampling::bilinear_antialias: return "bilinear_antialias";
    case PositionSampling::bucketized: return "bucketized";
  }
  return "?";
}

std::string_view to_string(VitFamily f) {
  switch (f) {
    case VitFamily::clip: return "clip";
    case VitFamily::siglip: return "siglip";
    case VitFamily::torchvision: return "torchvision";
    case VitFamily::vit: return "vit";
    case VitFamily::dinov2: return "dinov2";
    case VitFamily::qwen2_vl: return "qwen2_vl";
    case VitFamily::qwen2_5_vl: return "qwen2_5_vl";
    case VitFamily::qwen3_vl: return "qwen3_vl";
  }
  return "?";
}
std::string_view to_string(Activation a) {
  switch (a) {
    case Activation::quick_gelu: return "quick_gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::gelu_erf: return "gelu";
    case Activation::swiglu: return "swiglu";
  }
  return "?";
}
std::string_view to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::int8: return "int8";
  }
  return "?";
}

namespace {

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

WeightMatrix::WeightMatrix(Tensor t) {
  if (t.rank() != 2 || (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::f16))
    throw Error(Errc::internal, "WeightMatrix: a rank-2 f32, bf16 or f16 tensor is required");
  rows = t.dim(0), cols = t.dim(1), dtype = t.dtype();
  owned = std::move(t);
  data = owned.bytes();
}

WeightMatrix WeightMatrix::view(const void* p, DType dt, int64_t rows, int64_t cols) {
  WeightMatrix m;
  m.data = p, m.dtype = dt, m.rows = rows, m.cols = cols;
  return m;
}

float WeightMatrix::at(int64_t r, int64_t c) const {
  if (dtype == kWeightQ8_0) {
    float block[kQ8_0Block];
    encoder_detail::weight_row_f32(static_cast<const std::byte*>(data) + weight_bytes(dtype, r * cols + c / kQ8_0Block * kQ8_0Block),
                   dtype, 0, 0, kQ8_0Block, block);
    return block[c % kQ8_0Block];
  }
  const int64_t i = r * cols + c;
  if (dtype == DType::f32) return static_cast<const float*>(data)[i];
  const uint16_t h = static_cast<const uint16_t*>(data)[i];
  return dtype == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
}

VitModel VitModel::random(const VitConfig& config, uint64_t seed, const std::string& name) {
  const VitConfig& c = config;
  if (c.hidden < 1 || c.heads < 1 || c.hidden % c.heads || c.layers < 1 || c.mlp < 1 || c.grid < 1 || c.patch_px < 2)
    throw Error(Errc::invalid_argument, "random ViT: inconsistent dimensions");
  auto m = std::make_shared<Impl>();
  m->config = config;
  m->config.naming = "random";
  m->config.layers_in_checkpoint = c.layers;
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
    ly.qkv_w = WeightMatrix(random_tensor({3 * D, D}, rng, 0.02f));
    ly.qkv_b = random_tensor({3 * D}, rng, 0.02f);
    ly.out_w = WeightMatrix(random_tensor({D, D}, rng, 0.02f));
    ly.out_b = random_tensor({D}, rng, 0.02f);
    ly.ln2_w = random_tensor({D}, rng, 0.02f, 1.0f);
    ly.ln2_b = random_tensor({D}, rng, 0.02f);
    ly.fc1_w = WeightMatrix(random_tensor({M, D}, rng, 0.02f));
    ly.fc1_b = random_tensor({M}, rng, 0.02f);
    ly.fc2_w = WeightMatrix(random_tensor({D, M}, rng, 0.02f));
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

namespace {

// Vision towers that are not plain ViTs, refused by name before a loader could half-recognise
// them (Qwen2-VL's blocks.N.attn.qkv look like timm's; its patch embedding is a Conv3d). Told by
// config.json's model_type (the VLM's or its vision part's) or by a tensor name fragment.
void refuse_known_unsupported(const encoder_detail::WeightSource& w, const nlohmann::json& full_config, const std::string& spec) {
  struct Known {
    const char* what;
    std::vector<const char*> model_types;     // a prefix of config.json's model_type
    std::vector<const char*> name_fragments;  // any tensor name containing one of them
  };
  static const Known known[] = {
      {"a Pixtral / Mistral 3 vision tower (2-D rotary positions, RMSNorm, a gated MLP)",
       {"pixtral", "mistral3"},
       {"patch_conv.weight"}},
      {"an EVA / EVA-02 tower (rotary positions, SwiGLU fc1_g / fc1_x, sub-LayerNorm)", {"eva"}, {"mlp.fc1_g."}},
      {"a Llama 4 vision tower (2-D rotary positions, pixel-shuffle adapter)",
       {"llama4"},
       {"vision_model.patch_embedding.linear.", "vision_adapter."}},
  };
  std::vector<std::string> types;
  for (const nlohmann::json* j : {&full_config, full_config.contains("vision_config") ? &full_config["vision_config"]
                                                                                       : static_cast<const nlohmann::json*>(nullptr)})
    if (j && j->is_object() && j->contains("model_type") && (*j)["model_type"].is_string())
      types.push_back((*j)["model_type"].get<std::string>());
  const std::vector<std::string> names = w.names();
  for (const Known& k : known) {
    std::string why;
    for (const std::string& t : types)
      for (const char* pre : k.model_types)
        if (why.empty() && t.rfind(pre, 0) == 0) why = "config.json says model_type '" + t + "'";
    for (const char* frag : k.name_fragments)
      for (const std::string& n : names)
        if (why.empty() && n.find(frag) != std::string::npos) why = "it has " + n;
    if (!why.empty())
      throw Error(Errc::unsupported, "'" + spec + "' is " + k.what + " (" + why + "): fovea runs ViTs with learned " +
                                         "absolute positions; this tower is not supported");
  }
}

}  // namespace

namespace {

// The model a "random:NAME[:SEED]" spec names: ViT-B/16, S/16 or Ti/16's shape (or a tiny one
// for tests), CLIP-shaped, its weights drawn from the seed.
VitModel random_model(const std::string& spec) {
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
  } else if (rest == "vit-ti16") {  // ViT-Ti/16's shape: the random twin of a real ViT-Ti checkpoint
    c.hidden = 192, c.heads = 3, c.mlp = 768;
  } else if (rest == "vit-tiny") {  // for tests
    c.hidden = 64, c.heads = 4, c.mlp = 128, c.layers = 2, c.grid = 4;
  } else {
    throw Error(Errc::invalid_argument,
                "--model " + spec + ": unknown random model (random:vit-b16, random:vit-s16, random:vit-ti16)");
  }
  c.pre_norm = true;
  c.input.source = "CLIP defaults (random model)";
  return VitModel::random(c, seed, spec);
}

// The file a spec names: itself, or in a directory (HF's layout, first found)
// model.safetensors.index.json (sharded), model.safetensors, pytorch_model.bin.index.json,
// pytorch_model.bin.
std::string checkpoint_file(const std::string& spec) {
  std::string file = spec;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    file = (fs::path(spec) / "model.safetensors").string();  // named in the error when none is there
    for (const char* name : {"model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json",
                             "pytorch_model.bin"})
      if (fs::exists(fs::path(spec) / name, ec)) {
        file = (fs::path(spec) / name).string();
        break;
      }
  }
  return file;
}

// The open files, kept by the model when its weight matrices are views into their mappings.
struct Files {
  std::optional<GgufFile> gguf;
  std::optional<SafetensorsFile> st;
  std::optional<TorchCheckpoint> torch;
  std::unique_ptr<encoder_detail::WeightSource> weights;
  std::unique_ptr<encoder_detail::WeightSource> prefixed;  // weights seen under a wrapper's prefix
};

// The first loader that recognises the checkpoint's naming, on its tensors as they are or, for a
// model inside a wrapper, under a common prefix (files.prefixed then holds that view); null
// when none does.
std::shared_ptr<VitModel::Impl> run_loaders(const encoder_detail::Checkpoint& ck, Files& files) {
  using namespace encoder_detail;
  // Most specific first: an HF LLaVA checkpoint also holds a CLIP or SigLIP tower.
  const ModelLoader* loaders[] = {&gguf_mmproj_loader(), &hf_qwen2_vl_loader(), &hf_qwen2_5_vl_loader(), &hf_qwen3_vl_loader(),
                                  &torchvision_loader(), &hf_llava_loader(), &hf_paligemma_loader(),
                                  &intern_vit_loader(),   &hf_blip_loader(),     &hf_clip_loader(),     &hf_siglip_loader(),
                                  &hf_vit_loader(),       &hf_dinov2_loader(),   &timm_vit_loader(),
                                  &open_clip_loader()};
  auto try_loaders = [&](const Checkpoint& c) -> std::shared_ptr<VitModel::Impl> {
    for (const ModelLoader* l : loaders)
      if (l->accepts(c)) return l->load(c);
    return nullptr;
  };
  std::shared_ptr<VitModel::Impl> m = try_loaders(ck);
  // A model inside a wrapper: a PyTorch Lightning module's "model.", a task model's "backbone."
  // or "encoder." (other tensors beside it: a head, a loss). The loaders again on the tensors
  // under each of the most common leading one and two name components.
  for (int depth = 1; depth <= 2 && !m && !files.gguf; ++depth)
    for (const std::string& prefix : common_prefixes(files.weights->names(), depth, 3)) {
      files.prefixed = prefixed_source(*files.weights, prefix);
      Checkpoint under = ck;
      under.weights = files.prefixed.get();
      if ((m = try_loaders(under))) break;
      files.prefixed.reset();
    }
  return m;
}

// What fovea's tokenizer can feed the model (every loader's result): RGB patches of 2..256
// pixels, normalised with finite statistics. A file claiming otherwise describes a model fovea
// cannot run; say so when it loads, naming the file, rather than at the first encode (where it
// read as a mistake in the user's --patch).
void check_runnable(const VitConfig& cfg, const std::string& spec) {
  if (!(cfg.ln_eps > 0.0f && cfg.ln_eps < 1.0f))  // config.json's layer_norm_eps: NaN, 0, < 0, ≥ 1
    throw Error(Errc::corrupt_data, "'" + spec + "': layer norm epsilon " + std::to_string(cfg.ln_eps) +
                                        " is out of range (0, 1)");
  if (cfg.channels != 3)
    throw Error(Errc::unsupported, "'" + spec + "': the model takes " + std::to_string(cfg.channels) +
                                       "-channel patches; fovea's patches are RGB (3 channels)");
  if (cfg.patch_px < 2 || cfg.patch_px > (cfg.native.enabled() ? 64 : 256))
    throw Error(Errc::unsupported, "'" + spec + "': the model's patch size is " + std::to_string(cfg.patch_px) +
                                       " pixels; fovea's tokenizer makes patches of 2 to 256 pixels");
  for (int i = 0; i < 3; ++i)
    // The extractor applies (x/255 − mean)/std as x·(1/(255·std)) − mean/std in float: both
    // factors must be finite too (a mean of 1e38 over a std of 0.5 is not).
    if (!std::isfinite(cfg.input.mean[size_t(i)]) || !std::isfinite(cfg.input.std[size_t(i)]) ||
        !(cfg.input.std[size_t(i)] > 0) || !std::isfinite(1.0f / (255.0f * cfg.input.std[size_t(i)])) ||
        !std::isfinite(cfg.input.mean[size_t(i)] / cfg.input.std[size_t(i)]))
      throw Error(Errc::corrupt_data, "'" + spec + "': its normalisation (" + cfg.input.source +
                                          ") has a non-finite mean, a std that is not finite and > 0, or a "
                                          "mean/std ratio beyond float range");
}

}  // namespace

VitModel VitModel::load(const std::string& spec, const ModelLoadOptions& options) {
  if (spec.rfind("random:", 0) == 0) return random_model(spec);
  // The format by content: GGUF starts with its magic, a PyTorch checkpoint with a ZIP header;
  // everything else is tried as safetensors.
  using namespace encoder_detail;
  auto files = std::make_shared<Files>();
  std::optional<GgufFile>& gguf = files->gguf;
  std::optional<SafetensorsFile>& st = files->st;
  std::unique_ptr<WeightSource>& weights = files->weights;
  const std::string file = checkpoint_file(spec);
  Checkpoint ck;
  ck.path = file;
  const bool is_gguf = looks_like_gguf(file);
  std::error_code regular_ec;  // (an unreadable path is the opener's error to report)
  if (!is_gguf && file.ends_with(".gguf") && std::filesystem::is_regular_file(file, regular_ec)) {
    const FileKind kind = io_detail::identify_file(file);
    throw Error(Errc::corrupt_data, "'" + file + "' is not a GGUF file: it does not start with the magic \"GGUF\"" +
                                        (kind.known() ? " (it is " + kind.description + ")" : std::string()));
  }
  if (is_gguf) {
    gguf.emplace(GgufFile::open(file));
    weights = gguf_source(*gguf);
    ck.gguf = &*gguf;
  } else {
    if (file.ends_with(".index.json")) {
      weights = sharded_safetensors_source(file);
    } else if (looks_like_torch_checkpoint(file)) {
      files->torch.emplace(TorchCheckpoint::open(file));
      weights = torch_source(*files->torch);
    } else {
      st.emplace(SafetensorsFile::open(file));
      weights = safetensors_source(*st);
    }
    ck.full_config = read_json_beside(file, "config.json");
    ck.config = vision_part(ck.full_config);
    ck.preprocessor = read_json_beside(file, "preprocessor_config.json");
    ck.video_preprocessor = read_json_beside(file, "video_preprocessor_config.json");
    ck.open_clip = read_json_beside(file, "open_clip_config.json");
  }
  weights->map_weights = options.map_weights;
  ck.weights = weights.get();
  if (!gguf) refuse_known_unsupported(*weights, ck.full_config, spec);
  std::shared_ptr<Impl> m = run_loaders(ck, *files);
  if (!m)
    throw Error(Errc::unsupported,
                "'" + spec + "': no ViT naming recognised (expected vision_model.embeddings.patch_embedding.weight "
                "for HF CLIP/SigLIP, conv_proj.weight for torchvision, [vit.]embeddings.patch_embeddings.projection.weight "
                "with encoder.layer.N.layernorm_before for HF ViT or encoder.layer.N.norm1 for HF DINOv2, "
                "patch_embed.proj.weight with blocks.N.attn.qkv for timm ViT/DeiT, [visual.]conv1.weight with "
                "transformer.resblocks.N for open_clip / OpenAI CLIP, vision_model.encoder.layers.N.attn.qkv for "
                "InternViT, vision_model.encoder.layers.N.self_attn.qkv for BLIP / BLIP-2, or a llama.cpp mmproj .gguf)");
  check_runnable(m->config, spec);
  m->source = spec;
  // A converted checkpoint's int8 layer matrices (fovea convert --dtype int8), used where they lie.
  const int int8_tensors = st ? attach_stored_int8(*m, *st, files) : 0;
  m->tensors_used += int8_tensors;
  m->tensors_ignored = int(weights->names().size()) - m->tensors_used;
  bool mapped = int8_tensors > 0;
  for (const VitLayer& l : m->layers)
    mapped = mapped || l.qkv_w.mapped() || l.out_w.mapped() || l.fc1_w.mapped() || l.fc2_w.mapped();
  mapped = mapped || m->mm0_w.mapped() || m->mm2_w.mapped();  // (a Q8_0 file's projector may be F16)
  if (mapped) m->mapping = std::move(files);
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
       (c.native.enabled() ? " native merge=" + std::to_string(c.native.merge) +
                                 (c.native.window_px ? " window=" + std::to_string(c.native.window_px) : std::string())
                           : " G=" + std::to_string(c.grid)) +
       " act=" + std::string(to_string(c.act));
  if (c.registers > 0) s += " registers=" + std::to_string(c.registers);
  if (c.projector != ProjectorType::none)
    s += " projector=" + std::string(to_string(c.projector)) + "(" + std::to_string(c.projector_dim) + ")";
  s += " [" + c.naming + "] (" + impl_->source + ")";
  return s;
}

VitModel::Impl& encoder_detail::ModelAccess::unshared(VitModel& model) {
  // (int8 copies of the layers, quantized or read from the file, would go stale too.)
  if (!model.impl_ || model.impl_.use_count() != 1 || !model.impl_->packed.untouched() || model.impl_->int8_layers)
    throw Error(Errc::invalid_argument,
                "a model's weights can be edited only before it is copied or used to encode");
  return *model.impl_;
}

}  // namespace fovea
