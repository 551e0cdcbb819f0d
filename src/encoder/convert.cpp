// fovea convert: a checkpoint rewritten for fast loading (convert_checkpoint in encoder.hpp), and
// the int8 layer matrices such a file stores, read back when it loads (attach_stored_int8).
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "encoder/encoder_internal.hpp"
#include "encoder/int8.hpp"
#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"

namespace fovea {

using namespace encoder_detail;

namespace {

namespace fs = std::filesystem;

const char* const kKinds[] = {"qkv", "out", "fc1", "fc2"};
const WeightMatrix& matrix_of(const VitLayer& l, int kind) {
  switch (kind) {
    case 0: return l.qkv_w;
    case 1: return l.out_w;
    case 2: return l.fc1_w;
    default: return l.fc2_w;
  }
}
std::string int8_name(size_t layer, int kind, const char* part) {
  return "fovea.int8." + std::to_string(layer) + "." + kKinds[kind] + "." + part;
}

// The safetensors file a checkpoint spec names: the file, or a directory's model.safetensors.
std::string safetensors_of(const std::string& spec) {
  std::error_code ec;
  if (fs::is_directory(spec, ec)) return (fs::path(spec) / "model.safetensors").string();
  return spec;
}

// A weight matrix of the layers or heads: rank 2, and not a table of embeddings by its name.
bool is_matrix(const SafetensorsFile::Entry& e) {
  if (e.shape.size() != 2) return false;
  std::string n = e.name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (const char* s : {"pos", "embed", "cls", "class_token", "register", "probe"})
    if (n.find(s) != std::string::npos) return false;
  return true;
}

}  // namespace

ConvertResult convert_checkpoint(const std::string& spec, const std::string& out, Precision stored) {
  if (stored != Precision::bf16 && stored != Precision::int8)
    throw Error(Errc::invalid_argument, "convert: the stored precision must be bf16 or int8");
  std::error_code ec;
  const bool dir_in = fs::is_directory(spec, ec);
  const std::string src = safetensors_of(spec);
  if (!fs::is_regular_file(src, ec))
    throw Error(Errc::invalid_argument, "convert: '" + spec + "' is not a .safetensors checkpoint (a file, or a directory "
                                        "with model.safetensors); convert reads safetensors checkpoints");
  const VitModel model = VitModel::load(spec, {.map_weights = true});  // what fovea reads from it: checked first
  const SafetensorsFile st = SafetensorsFile::open(src);
  std::string dst = out;
  if (dir_in || fs::is_directory(out, ec) || out.ends_with("/")) {
    fs::create_directories(out, ec);
    if (ec) throw Error(Errc::io, "convert: cannot create '" + out + "': " + ec.message());
    dst = (fs::path(out) / "model.safetensors").string();
  }
  if (fs::exists(dst, ec) && fs::equivalent(dst, src, ec))
    throw Error(Errc::invalid_argument, "convert: the output would overwrite the checkpoint it reads");
  // Every tensor of the source under its own name: floating matrices as bf16; everything else
  // floating (norms, biases, convolution kernels, position tables, class and register tokens,
  // which are read once into float32 anyway) as float32, so it keeps every bit; other types as
  // they are.
  std::vector<Tensor> tensors;
  std::vector<NamedTensor> named;
  tensors.reserve(st.entries().size() + model.impl().layers.size() * 16);
  for (const SafetensorsFile::Entry& e : st.entries()) {
    if (e.name.rfind("fovea.int8.", 0) == 0) continue;  // a converted file converted again: made anew below
    const bool floating = e.dtype_known && (e.dtype == DType::f32 || e.dtype == DType::f16 || e.dtype == DType::bf16 ||
                                            e.dtype == DType::f64);
    if (!e.dtype_known) continue;
    if (!floating) {
      tensors.push_back(st.load(e));
    } else {
      Tensor f = st.load_f32(e);
      if (is_matrix(e)) {
        Tensor b(DType::bf16, e.shape);
        to_bf16_row(f.data<float>(), b.data<uint16_t>(), f.numel());
        tensors.push_back(std::move(b));
      } else {
        tensors.push_back(std::move(f));
      }
    }
    named.push_back({e.name, nullptr});
  }
  int matrices = 0;
  if (stored == Precision::int8) {
    // The layer matrices as the int8 kernels read them (int8.hpp): panels, per-channel scales and
    // row sums, from the source's own values (not from the bf16 copies beside them).
    const int8::Layers& q = int8_layers(model.impl());
    const std::vector<VitLayer>& layers = model.impl().layers;
    for (size_t i = 0; i < layers.size(); ++i)
      for (int kind = 0; kind < 4; ++kind) {
        const int8::Weight* w = q.find(matrix_of(layers[i], kind).data);
        if (!w) continue;
        Tensor panels(DType::i8, {w->np / int8::kNr, w->kp * int8::kNr});
        std::memcpy(panels.bytes(), w->panel_bytes(), size_t(w->np * w->kp));
        Tensor scale(DType::f32, {w->np}), sum(DType::i32, {w->np}), nk(DType::i64, {2});
        std::memcpy(scale.bytes(), w->scale.data(), size_t(w->np) * 4);
        std::memcpy(sum.bytes(), w->sum.data(), size_t(w->np) * 4);
        nk.data<int64_t>()[0] = w->n, nk.data<int64_t>()[1] = w->k;
        for (auto& [part, t] : {std::pair<const char*, Tensor*>{"q", &panels}, {"scale", &scale}, {"sum", &sum}, {"nk", &nk}}) {
          tensors.push_back(std::move(*t));
          named.push_back({int8_name(i, kind, part), nullptr});
        }
        ++matrices;
      }
  }
  for (size_t i = 0; i < named.size(); ++i) named[i].tensor = &tensors[i];
  std::map<std::string, std::string> meta = st.metadata();
  meta["fovea.converted"] = stored == Precision::int8 ? "bf16+int8" : "bf16";
  if (stored == Precision::int8)
    meta["fovea.int8"] = "layer matrices per output channel (scale = max|row| / 127), panels of 16 channels x 4 k";
  save_safetensors(dst, named, meta);
  // The JSON files the loaders read beside the weights.
  const fs::path from = fs::path(src).parent_path(), to = fs::path(dst).parent_path();
  if (!fs::equivalent(from.empty() ? "." : from, to.empty() ? "." : to, ec))
    for (const char* j : {"config.json", "preprocessor_config.json", "video_preprocessor_config.json", "open_clip_config.json"})
      if (fs::is_regular_file(from / j, ec)) fs::copy_file(from / j, to / j, fs::copy_options::overwrite_existing, ec);
  ConvertResult r;
  r.path = dst;
  r.tensors = int(named.size());
  r.int8_matrices = matrices;
  r.bytes = size_t(fs::file_size(dst, ec));
  return r;
}

namespace encoder_detail {

int attach_stored_int8(VitModel::Impl& m, const SafetensorsFile& st, std::shared_ptr<const void> keep) {
  if (!st.find(int8_name(0, 0, "q"))) return 0;
  auto layers = std::make_shared<int8::Layers>();
  int used = 0;
  auto bad = [&](const std::string& what) {
    return Error(Errc::corrupt_data, "'" + st.path() + "': " + what + " (written by fovea convert --dtype int8?)");
  };
  for (size_t i = 0; i < m.layers.size(); ++i)
    for (int kind = 0; kind < 4; ++kind) {
      const WeightMatrix& wm = matrix_of(m.layers[i], kind);
      const SafetensorsFile::Entry* q = st.find(int8_name(i, kind, "q"));
      if (!q || !present(wm)) continue;
      const SafetensorsFile::Entry* sc = st.find(int8_name(i, kind, "scale"));
      const SafetensorsFile::Entry* su = st.find(int8_name(i, kind, "sum"));
      const SafetensorsFile::Entry* nk = st.find(int8_name(i, kind, "nk"));
      const int64_t n = wm.rows, k = wm.cols, kp = (k + 3) / 4 * 4, np = (n + 31) / 32 * 32;
      if (!sc || !su || !nk || q->dtype != DType::i8 || sc->dtype != DType::f32 || su->dtype != DType::i32 ||
          nk->dtype != DType::i64 || q->shape != std::vector<int64_t>{np / int8::kNr, kp * int8::kNr} ||
          sc->shape != std::vector<int64_t>{np} || su->shape != std::vector<int64_t>{np} || nk->numel() != 2)
        throw bad(int8_name(i, kind, "*") + " does not describe a " + std::to_string(n) + "x" + std::to_string(k) +
                  " matrix");
      const int64_t* dims = reinterpret_cast<const int64_t*>(st.data(*nk).data());
      if (dims[0] != n || dims[1] != k) throw bad(int8_name(i, kind, "nk") + " does not match the model's matrix");
      int8::Weight w;
      w.n = n, w.k = k, w.kp = kp, w.np = np;
      w.mapped = st.data(*q).data();
      w.scale.resize(size_t(np)), w.sum.resize(size_t(np));
      std::memcpy(w.scale.data(), st.data(*sc).data(), size_t(np) * 4);
      std::memcpy(w.sum.data(), st.data(*su).data(), size_t(np) * 4);
      layers->bytes += w.bytes();
      layers->weights.emplace(wm.data, std::move(w));
      used += 4;
    }
  layers->stored = true;
  layers->keep = std::move(keep);
  m.int8_layers = std::move(layers);
  return used;
}

}  // namespace encoder_detail
}  // namespace fovea
