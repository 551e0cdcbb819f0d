// fovea._fovea: the pybind11 module under the `fovea` Python package.
//
// Nothing here re-implements the pipeline: every call goes to the C++ library. What this file
// owns is the boundary:
//   * inputs: a uint8 [H, W, 3] / [H, W] numpy array is wrapped as a fovea::ImageViewU8 and
//     read in place (no copy); any other dtype or layout is a TypeError / ValueError;
//   * outputs: numpy arrays are views on tensors C++ owns, kept alive by the Python object
//     that owns them (Tokens, Encoding, TensorFile) or by a capsule;
//   * the GIL is released while the pipeline or the encoder runs;
//   * fovea::Error becomes ValueError (bad arguments), OSError (I/O) or RuntimeError, with
//     the library's one-line message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "fovea/embeddings.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/extract.hpp"
#include "fovea/image.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tar.hpp"
#include "fovea/token_cache.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/version_gen.hpp"
#include "fovea/video.hpp"
#include "fovea/view.hpp"
#include "fovea/viz.hpp"
#include "encoder/kernels.hpp"

namespace py = pybind11;
using namespace fovea;

namespace {

// ---- numpy <-> fovea ---------------------------------------------------------------------------

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::u8: return py::dtype::of<uint8_t>();
    case DType::i8: return py::dtype::of<int8_t>();
    case DType::u16: return py::dtype::of<uint16_t>();
    case DType::i16: return py::dtype::of<int16_t>();
    case DType::i32: return py::dtype::of<int32_t>();
    case DType::i64: return py::dtype::of<int64_t>();
    case DType::f16: return py::dtype("float16");
    case DType::f32: return py::dtype::of<float>();
    case DType::f64: return py::dtype::of<double>();
    case DType::bf16: break;
  }
  throw Error(Errc::unsupported, "numpy has no " + std::string(dtype_name(t)) + " dtype");
}

// A path argument (str, bytes or os.PathLike) as the OS would take it: the bytes of
// os.fsencode, not the repr of a bytes object, and a str from os.listdir of a name that is not
// UTF-8 (surrogate-escaped) back to its own bytes; an embedded NUL is refused as Python's open()
// refuses it (the C library would read the path only up to it).
std::string fs_path(const py::handle& p) {
  const std::string s = py::bytes(py::module_::import("os").attr("fsencode")(p));
  if (s.find('\0') != std::string::npos) throw py::value_error("embedded null byte in a path");
  return s;
}

// The other way: a string that holds a path (the bytes the OS has) as Python's str for it,
// os.fsdecode (a name that is not UTF-8 comes back surrogate-escaped, as os.listdir gives it).
py::object fs_str(const std::string& s) { return py::module_::import("os").attr("fsdecode")(py::bytes(s)); }

// h.cast<T>() with a TypeError saying what was expected (pybind11's own names C++ types).
template <typename T> T cast_arg(const py::handle& h, const char* expected) {
  try {
    return h.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(expected) + ", got " + std::string(py::str(py::type::of(h).attr("__name__"))) +
                         (py::isinstance<py::tuple>(h) || py::isinstance<py::list>(h) ? " " + std::string(py::repr(h)).substr(0, 80) : ""));
  }
}

std::optional<DType> fovea_dtype(const py::dtype& d) {
  // A non-native byte order (">f4" here) would be read as native: refuse it, saying how to fix.
  const std::string order = d.attr("byteorder").cast<std::string>();  // '=', '|', '<' or '>'
  if (order == (std::endian::native == std::endian::little ? ">" : "<"))
    throw py::value_error("arrays of the other byte order (dtype " + std::string(py::str(static_cast<const py::handle&>(d))) +
                          ") are not read as such: pass a.astype(a.dtype.newbyteorder('='))");
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'u' && size == 1) return DType::u8;
  if (kind == 'i' && size == 1) return DType::i8;
  if (kind == 'u' && size == 2) return DType::u16;
  if (kind == 'i' && size == 2) return DType::i16;
  if (kind == 'i' && size == 4) return DType::i32;
  if (kind == 'i' && size == 8) return DType::i64;
  if (kind == 'f' && size == 2) return DType::f16;
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 8) return DType::f64;
  return std::nullopt;
}

// A numpy view of `t`'s memory; `owner` keeps that memory alive.
py::array tensor_view(const Tensor& t, py::handle owner) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  return py::array(numpy_dtype(t.dtype()), shape, {}, t.bytes(), owner);
}

// Moves `t` into a capsule the array owns: the array is the only owner.
py::array tensor_array(Tensor&& t) {
  if (t.rank() == 0) return py::none();
  auto* heap = new Tensor(std::move(t));
  py::capsule owner(heap, [](void* p) { delete static_cast<Tensor*>(p); });
  return tensor_view(*heap, owner);
}

// [H, W, 3] uint8, C-contiguous, from a planar image (pictures: seen, overlay).
py::array_t<uint8_t> to_hwc(const ImageU8& img) {
  const int H = img.height(), W = img.width(), C = img.channels();
  py::array_t<uint8_t> out({H, W, C});
  uint8_t* d = out.mutable_data();
  for (int y = 0; y < H; ++y)
    for (int c = 0; c < C; ++c) {
      const uint8_t* s = img.row(c, y);
      uint8_t* o = d + (size_t(y) * W) * C + c;
      for (int x = 0; x < W; ++x) o[size_t(x) * C] = s[x];
    }
  return out;
}

// The caller's array as an image view, or a TypeError / ValueError saying what to do.
ImageViewU8 array_view(const py::array& a) {
  if (!py::isinstance<py::array_t<uint8_t>>(a) || a.dtype().kind() != 'u' || a.itemsize() != 1) {
    const char kind = a.dtype().kind();
    const std::string how = kind == 'f' ? "; convert floats in [0, 1] with (a * 255).round().astype(np.uint8)"
                            : kind == 'b' ? "; convert with a.astype(np.uint8) * 255"
                            : a.itemsize() == 2 ? "; convert 16-bit samples with (a >> 8).astype(np.uint8), or give the file's path"
                                                : "";
    throw py::type_error("image must be a uint8 numpy array [H, W, 3] (RGB) or [H, W] (gray), got dtype " +
                         std::string(py::str(a.dtype())) + how);
  }
  if (a.ndim() != 2 && a.ndim() != 3)
    throw py::value_error("image must be [H, W, 3] or [H, W], got " + std::to_string(a.ndim()) + " dimensions");
  for (py::ssize_t i = 0; i < a.ndim(); ++i)
    if (a.shape(i) > INT_MAX)
      throw py::value_error("image dimension " + std::to_string(i) + " is " + std::to_string(a.shape(i)) +
                            ", over the largest supported extent (2^31 - 1)");
  const int H = static_cast<int>(a.shape(0)), W = static_cast<int>(a.shape(1));
  const int C = a.ndim() == 3 ? static_cast<int>(a.shape(2)) : 1;
  if (C != 1 && C != 3)
    throw py::value_error("image must have 3 channels (RGB) or 1 (gray), got " + std::to_string(C) +
                          (C == 4 ? " (drop alpha with a[..., :3])" : ""));
  if (H < 1 || W < 1) throw py::value_error("image is empty (" + std::to_string(W) + "x" + std::to_string(H) + ")");
  const py::ssize_t rs = a.strides(0), ps = a.strides(1), cs = a.ndim() == 3 ? a.strides(2) : 1;
  // Any positive strides whose samples do not overlap are read in place: HWC with padded rows
  // (a crop of a larger array), wider pixels than the channels read (a[..., :3] of RGBA), and
  // planar data seen as [H, W, C] (chw.transpose(1, 2, 0), fovea's video frames). Flipped
  // (negative) strides are not.
  if (rs <= 0 || ps <= 0 || (C > 1 && cs <= 0))
    throw py::value_error("image strides must be positive (got " + std::to_string(rs) + ", " + std::to_string(ps) +
                          ", " + std::to_string(cs) + " bytes: " +
                          (rs == 0 || ps == 0 || (C > 1 && cs == 0) ? "a broadcast" : "a flipped") +
                          " view); pass np.ascontiguousarray(image)");
  ImageViewU8 v(static_cast<const uint8_t*>(a.data()), W, H, C, ps, rs, C > 1 ? cs : 1);
  try {
    v.check();
  } catch (const Error&) {
    throw py::value_error("image strides (" + std::to_string(rs) + ", " + std::to_string(ps) + ", " + std::to_string(cs) +
                          " bytes) make samples overlap; pass np.ascontiguousarray(image)");
  }
  return v;
}

// ---- Tokens ----------------------------------------------------------------------------------

struct PyTokens {
  Tokenization t;
  Query query;
  TokenizeParams params;
  std::string source;  // the path, or "<array>"
  std::string preprocessing_source;  // where the normalisation came from (token file metadata)
  py::object pixels;   // the array the pyramid's level 0 borrows (None when fovea owns it)
  int width = 0, height = 0;
};

py::dict to_dict(const std::map<std::string, std::string>& m) {
  py::dict d;
  for (const auto& [k, v] : m) d[py::str(k)] = py::str(v);
  return d;
}

template <typename T>
py::array vector_view(const std::vector<T>& v, std::vector<py::ssize_t> shape, py::handle owner) {
  return py::array(py::dtype::of<T>(), shape, {}, v.data(), owner);
}

// ---- checks the CLI does on its flags, for keyword arguments --------------------------------

void check_params(const TokenizeParams& p) {
  if (p.patch_px < 2 || p.patch_px > 256) throw fovea::invalid_argument("patch must be in [2, 256], got " + std::to_string(p.patch_px));
  if (p.alloc.budget_tokens < 1 || p.alloc.budget_tokens > (1 << 24))  // the CLI's --budget range
    throw fovea::invalid_argument("budget must be in [1, 16777216] tokens, got " + std::to_string(p.alloc.budget_tokens));
  if (!(p.alloc.sharpness >= 0.5f && p.alloc.sharpness <= 4.0f)) throw fovea::invalid_argument("sharpness must be in [0.5, 4]");
  if (p.alloc.max_level < -1 || p.alloc.max_level > 24) throw fovea::invalid_argument("max_level must be in [-1, 24]");
  if (!std::isfinite(p.relevance.e0) || p.relevance.e0 <= 0) throw fovea::invalid_argument("e0 must be a number > 0");
  if (!(p.relevance.fine_bias >= 0 && p.relevance.fine_bias <= 4)) throw fovea::invalid_argument("fine_bias must be in [0, 4]");
  if (!(p.relevance.detail_focus >= 0 && p.relevance.detail_focus <= 4)) throw fovea::invalid_argument("detail_focus must be in [0, 4]");
  if (!(p.relevance.fixation_spread > 0 && p.relevance.fixation_spread <= 1)) throw fovea::invalid_argument("fixation_spread must be in (0, 1]");
  if (p.alloc.lookahead < 1 || p.alloc.lookahead > 8) throw fovea::invalid_argument("lookahead must be in [1, 8]");
  const RelevanceWeights& w = p.relevance.weights;
  for (float v : {w.information, w.saliency, w.query, w.floor, w.detail})
    if (!std::isfinite(v) || v < 0) throw fovea::invalid_argument("weights must be finite and >= 0");
}

}  // namespace

// Fixations mean what the CLI's --fixation X,Y[,R[,WEIGHT]] means: (x, y), (x, y, radius) or
// (x, y, radius, weight); fovea.Fixation(x, y, radius=0, weight=1) is such a tuple. Also
// native.cpp's (the windows foveation of the native towers).
Query make_query(const std::vector<std::vector<float>>& fixations, const std::vector<std::vector<float>>& regions) {
  Query q;
  for (const auto& v : fixations) {
    if (v.size() < 2 || v.size() > 4)
      throw fovea::invalid_argument("a fixation is (x, y), (x, y, radius) or (x, y, radius, weight), as the CLI's --fixation X,Y[,R[,WEIGHT]]; "
                "got " + std::to_string(v.size()) + " values");
    for (float f : v)
      if (!std::isfinite(f)) throw fovea::invalid_argument("fixation values must be finite");
    if (v.size() >= 3 && v[2] < 0) throw fovea::invalid_argument("fixation radius must be >= 0");
    if (v.size() == 4 && v[3] < 0) throw fovea::invalid_argument("fixation weight must be >= 0");
    q.fixations.push_back({v[0], v[1], v.size() == 4 ? v[3] : 1.0f, v.size() >= 3 ? v[2] : 0.0f});
  }
  for (const auto& v : regions) {
    if (v.size() != 4 && v.size() != 5) throw fovea::invalid_argument("a region is (x0, y0, x1, y1) or (x0, y0, x1, y1, weight)");
    for (float f : v)
      if (!std::isfinite(f)) throw fovea::invalid_argument("region values must be finite");
    if (!(v[2] > v[0]) || !(v[3] > v[1])) throw fovea::invalid_argument("a region needs x1 > x0 and y1 > y0");
    if (v.size() == 5 && v[4] < 0) throw fovea::invalid_argument("region weight must be >= 0");
    q.regions.push_back({v[0], v[1], v[2], v[3], v.size() == 5 ? v[4] : 1.0f});
  }
  return q;
}

namespace {

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::f32;
  if (s == "f16" || s == "float16") return DType::f16;
  if (s == "u8" || s == "uint8") return DType::u8;
  throw fovea::invalid_argument("dtype must be 'f32', 'f16' or 'u8', got '" + s + "'");
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  if (s == "int8") return Precision::int8;
  throw fovea::invalid_argument("precision must be 'fp32', 'bf16' or 'int8', got '" + s + "'");
}

// Video sessions' incremental encoder runs fp32 or bf16.
Precision parse_video_precision(const std::string& s) {
  const Precision p = parse_precision(s);
  if (p == Precision::int8) throw fovea::invalid_argument("precision='int8' is for image encodes; video sessions encode in 'fp32' or 'bf16'");
  return p;
}

// The CLI's warning, as a Python RuntimeWarning: bf16 on a CPU without bf16 kernels runs fp32.
void warn_if_precision_falls_back(Precision asked) {
  if (runnable_precision(asked) != asked &&
      PyErr_WarnEx(PyExc_RuntimeWarning,
                   asked == Precision::int8
                       ? "precision='int8': this CPU has no int8 vector kernels (AVX2 or VNNI); running fp32"
                       : "precision='bf16': this CPU has no native bf16 matrix kernels (AVX512_BF16 or AMX); running fp32",
                   1) != 0)
    throw py::error_already_set();
}

ExecConfig exec_config(int threads) {
  if (threads < 0 || threads > 1024) throw fovea::invalid_argument("threads must be in [0, 1024] (0: one per hardware thread)");
  return ExecConfig{.threads = threads};
}

std::vector<float> query_vector(const py::object& q) {
  py::array_t<float, py::array::c_style | py::array::forcecast> a(q);
  const bool row = a.ndim() == 2 && a.shape(0) == 1;
  if (!(row || a.ndim() == 1) || a.shape(a.ndim() - 1) < 1) throw fovea::invalid_argument("query_embedding must be [D] or [1, D] with D >= 1");
  std::vector<float> v(a.data(), a.data() + a.shape(a.ndim() - 1));
  for (float f : v)
    if (!std::isfinite(f)) throw fovea::invalid_argument("query_embedding has a non-finite value");
  return v;
}

// The keyword arguments of tokenize (and video) as TokenizeParams, with the model's input
// contract (patch size, normalisation) unless the arguments say otherwise, as the CLI's
// encode does; `preprocessing_source` says where the normalisation came from.
TokenizeParams build_params(std::optional<int> budget, std::optional<int> patch, bool uniform, int max_level,
                            const std::map<std::string, float>& weights, std::optional<float> e0,
                            std::optional<float> sharpness, const std::string& dtype,
                            const std::optional<std::vector<float>>& mean, const std::optional<std::vector<float>>& std_,
                            bool normalize, const std::optional<VitModel>& vit, std::optional<float> fine_bias,
                            std::optional<float> detail_focus, std::optional<float> fixation_spread,
                            std::optional<int> lookahead, std::string& preprocessing_source,
                            const std::string& foveation = "mixed", std::optional<int> window_grid = std::nullopt,
                            bool keep_covered = false) {
  TokenizeParams p;
  // The model's input contract (patch size, normalisation) unless the arguments say otherwise,
  // as the CLI's encode does.
  if (vit && patch && *patch != vit->config().patch_px)
    throw fovea::invalid_argument("patch " + std::to_string(*patch) + " does not match the model's " +
              std::to_string(vit->config().patch_px) + "-px patches");
  p.patch_px = patch ? *patch : vit ? vit->config().patch_px : 16;
  p.uniform = uniform;
  // foveation "": the model's default with a model (fovea encode's), mixed without one.
  p.foveation = !foveation.empty() ? parse_foveation(foveation) : vit ? default_foveation(*vit) : Foveation::mixed;
  if (uniform && foveation == "windows") throw fovea::invalid_argument("uniform and foveation='windows' exclude each other");
  const bool windowed = !uniform && p.foveation == Foveation::windows;
  if (!windowed && (window_grid || keep_covered))
    throw fovea::invalid_argument(std::string(window_grid ? "window_grid" : "keep_covered") + " needs foveation='windows'");
  if (window_grid && (*window_grid < 1 || *window_grid > 256))
    throw fovea::invalid_argument("window_grid must be in [1, 256] tokens a side, got " + std::to_string(*window_grid));
  // A tower without a learned position grid (Qwen2-VL's rotary positions: grid 0) windows as a
  // model-less call does.
  p.windows.grid = window_grid                     ? *window_grid
                   : vit && vit->config().grid > 0 ? vit->config().grid
                                                   : std::max(1, int(std::lround(224.0 / p.patch_px)));
  p.windows.keep_covered = keep_covered;
  if (windowed && max_level != -1) throw fovea::invalid_argument("max_level shapes the mixed foveation's quadtree; foveation='windows' has none");
  p.alloc.budget_tokens = budget ? *budget : windowed ? 2 * p.windows.grid * p.windows.grid : 273;
  p.alloc.max_level = max_level;
  if (sharpness) p.alloc.sharpness = *sharpness;
  if (e0) p.relevance.e0 = *e0;
  if (fine_bias) p.relevance.fine_bias = *fine_bias;
  if (detail_focus) p.relevance.detail_focus = *detail_focus;
  if (fixation_spread) p.relevance.fixation_spread = *fixation_spread;
  if (lookahead) p.alloc.lookahead = *lookahead;
  for (const auto& [k, v] : weights) {
    RelevanceWeights& w = p.relevance.weights;
    if (k == "information" || k == "info" || k == "entropy") w.information = v;
    else if (k == "saliency" || k == "sal") w.saliency = v;
    else if (k == "query" || k == "q") w.query = v;
    else if (k == "floor") w.floor = v;
    else if (k == "detail") w.detail = v;
    else throw fovea::invalid_argument("weights: unknown key '" + k + "' (detail, information, saliency, query, floor)");
  }
  p.extract.dtype = parse_dtype(dtype);
  p.extract.norm.enabled = normalize;
  auto rgb = [](const std::optional<std::vector<float>>& v, const char* name, std::array<float, 3>& dst) {
    if (!v) return;
    if (v->size() != 3) throw fovea::invalid_argument(std::string(name) + " needs three values (R, G, B)");
    std::copy(v->begin(), v->end(), dst.begin());
  };
  if (vit && normalize) {
    const Normalization mn = normalization(vit->config().input);
    p.extract.norm.mean = mn.mean;
    p.extract.norm.std = mn.std;
  }
  rgb(mean, "mean", p.extract.norm.mean);
  rgb(std_, "std", p.extract.norm.std);
  const std::string defaults = vit ? "the model (" + vit->config().input.source + ")" : "CLIP defaults";
  preprocessing_source = !normalize       ? std::string("--no-normalize (x/255)")
                              : !mean && !std_ ? (vit ? "model: " + vit->config().input.source : std::string("CLIP defaults"))
                              : mean && std_   ? std::string("--mean/--std")
                              : vit            ? (mean ? "--mean; std from " : "--std; mean from ") + defaults
                                               : std::string("--mean/--std, CLIP defaults for the rest");
  check_params(p);
  return p;
}

std::unique_ptr<PyTokens> tokenize_py(const py::object& image, std::optional<int> budget,
                                      const std::vector<std::vector<float>>& fixations,
                                      const std::vector<std::vector<float>>& regions, std::optional<int> patch, bool uniform, int threads,
                                      int max_level, const std::map<std::string, float>& weights, std::optional<float> e0,
                                      std::optional<float> sharpness, const std::string& dtype,
                                      std::optional<std::vector<float>> mean, std::optional<std::vector<float>> std_,
                                      bool normalize, const py::object& query_embedding, const py::object& model,
                                      uint64_t max_pixels, const std::string& source, std::optional<float> fine_bias,
                                      std::optional<float> detail_focus, std::optional<float> fixation_spread,
                                      std::optional<int> lookahead, bool exif, const std::string& foveation,
                                      std::optional<int> window_grid, bool keep_covered) {
  auto out = std::make_unique<PyTokens>();
  std::optional<VitModel> vit;
  if (!model.is_none()) vit = cast_arg<VitModel>(model, "model must be a fovea.Model or None");
  out->params = build_params(budget, patch, uniform, max_level, weights, e0, sharpness, dtype, mean, std_, normalize, vit,
                             fine_bias, detail_focus, fixation_spread, lookahead, out->preprocessing_source, foveation,
                             window_grid, keep_covered);
  TokenizeParams& p = out->params;
  out->query = make_query(fixations, regions);
  const ExecConfig cfg = exec_config(threads);

  const bool query_features = !query_embedding.is_none();
  if (query_features) {
    if (!vit) throw fovea::invalid_argument("query_embedding needs model= (the tile features come from its patch embedding)");
    out->query.embedding = query_vector(query_embedding);
  }

  std::optional<ImageViewU8> view;
  std::string path;
  py::bytes encoded;
  bool have_bytes = false;
  if (py::isinstance<py::array>(image)) {
    view = array_view(image.cast<py::array>());
    out->pixels = image;
    out->source = "<array>";
  } else if (py::isinstance<py::bytes>(image) || py::isinstance<py::bytearray>(image) ||
             py::isinstance<py::memoryview>(image)) {
    // An encoded PNG/JPEG in memory (e.g. a WebDataset member): decoded by fovea.
    encoded = py::isinstance<py::bytes>(image) ? py::reinterpret_borrow<py::bytes>(image)
                                               : py::bytes(py::module_::import("builtins").attr("bytes")(image));
    have_bytes = true;
    out->source = "<bytes>";
  } else if (py::isinstance<py::str>(image) || py::hasattr(image, "__fspath__")) {
    path = fs_path(image);
    out->source = path;
  } else {
    throw py::type_error("image must be a uint8 numpy array [H, W, 3], a PIL image, a path or the file's bytes, got " +
                         std::string(py::str(py::type::of(image).attr("__name__"))));
  }

  std::span<const uint8_t> bytes_span;
  if (have_bytes) {
    const std::string_view sv = encoded;  // the bytes object stays alive (and immutable) below
    bytes_span = {reinterpret_cast<const uint8_t*>(sv.data()), sv.size()};
  }
  if (!source.empty()) out->source = source;
  {
    py::gil_scoped_release nogil;
    Executor ex(cfg);
    if (query_features) p.relevance.tile_features = tile_feature_fn(*vit, p.extract.norm, int(out->query.embedding.size()), ex);
    LoadOptions lo;
    lo.max_pixels = max_pixels;
    lo.apply_exif_orientation = exif;
    if (view) {
      out->t = tokenize(*view, out->query, p, ex);
    } else if (have_bytes) {
      out->t = tokenize(decode_image(bytes_span, lo, source.empty() ? "<bytes>" : source), out->query, p, ex);
    } else {
      out->t = tokenize(load_image(path, lo), out->query, p, ex);
    }
    p.relevance.tile_features = nullptr;  // holds the model and a reference to `ex`
  }
  out->width = out->t.pyramid.width();
  out->height = out->t.pyramid.height();
  return out;
}

CacheKey cache_key_of(const py::bytes& key) {
  const std::string_view k = key;
  if (k.size() != 32) throw fovea::invalid_argument("a cache key is 32 bytes (TokenCache.key)");
  CacheKey out;
  std::memcpy(out.digest.data(), k.data(), 32);
  return out;
}

// ---- Encoding --------------------------------------------------------------------------------

struct PyEncoding {
  Encoding e;
  py::object tokens = py::none();  // the Tokens it came from (for save), or None
  VitModel model;
  Precision precision = Precision::fp32;
  AttentionParams attention{};
};

std::map<std::string, std::string> embeddings_metadata(const PyTokens& t, const VitModel& model, Precision prec,
                                                       const AttentionParams& attention) {
  // The metadata `fovea encode -o` writes (tools/fovea/cmd_encode.cpp), so files from either
  // are interchangeable.
  std::map<std::string, std::string> meta = token_metadata(t.t, t.query, t.params);
  meta["source"] = t.source;
  for (auto& [k, v] : encoder_metadata(model, prec, attention)) meta[k] = v;
  meta["preprocessing_source"] = t.preprocessing_source;
  return meta;
}

// ---- several Tokens in one encoder call -------------------------------------------------------

// Model.encode_many: fovea::encode_tokens_batch over every Tokens (a windowed one is one image per
// window), so the linear layers read the weights once for all of them. Result i equals
// encode_full(tokens[i]) up to rounding (a GEMM over more rows may sum in another order).
std::vector<std::unique_ptr<PyEncoding>> encode_many_py(const VitModel& model, const py::sequence& items,
                                                       const std::string& precision, int threads) {
  std::vector<TokenBatchImage> images;
  std::vector<py::object> refs;
  for (const py::handle h : items) {
    if (!py::isinstance<PyTokens>(h)) throw py::type_error("encode_many takes a list of fovea.Tokens");
    const PyTokens& t = h.cast<const PyTokens&>();
    if (t.params.extract.dtype == DType::u8)
      throw fovea::invalid_argument("u8 patches are not normalised; tokenize with dtype='f32' or 'f16' to encode");
    images.push_back({&t.t.batch, t.width, t.height});
    refs.push_back(py::reinterpret_borrow<py::object>(h));
  }
  std::vector<std::unique_ptr<PyEncoding>> out;
  if (images.empty()) return out;
  const Precision prec = parse_precision(precision);
  warn_if_precision_falls_back(prec);
  const ExecConfig cfg = exec_config(threads);
  std::vector<Encoding> per;
  {
    py::gil_scoped_release nogil;
    Executor ex(cfg);
    per = encode_tokens_batch(model, images, EncodeParams{.precision = prec}, ex);
  }
  for (size_t k = 0; k < per.size(); ++k) {
    auto e = std::make_unique<PyEncoding>();
    e->e = std::move(per[k]);
    e->model = model;
    e->precision = prec;
    e->tokens = refs[k];
    out.push_back(std::move(e));
  }
  return out;
}

py::dict config_dict(const VitConfig& c) {
  py::dict d;
  d["family"] = std::string(to_string(c.family));
  d["hidden_size"] = c.hidden;
  d["layers"] = c.layers;
  d["heads"] = c.heads;
  d["mlp_size"] = c.mlp;
  d["patch_size"] = c.patch_px;
  d["position_grid"] = c.grid;
  d["native_size"] = c.native_px();
  d["channels"] = c.channels;
  d["class_token"] = c.class_token;
  d["registers"] = c.registers;
  d["activation"] = std::string(to_string(c.act));
  d["position_sampling"] = std::string(to_string(c.pos_sampling));
  d["layer_norm_eps"] = c.ln_eps;
  d["projection_dim"] = c.projection_dim;
  d["attention_pool"] = c.attention_pool;
  d["num_classes"] = c.num_classes;
  d["naming"] = c.naming;
  d["projector"] = std::string(to_string(c.projector));
  d["projected_dim"] = c.projector_dim;
  d["embeddings_output"] = embedding_output(c);
  d["ignored_projector"] = c.ignored_projector;  // "" when none
  const Normalization n = normalization(c.input);
  d["mean"] = std::vector<float>(n.mean.begin(), n.mean.end());
  d["std"] = std::vector<float>(n.std.begin(), n.std.end());
  d["preprocessing_source"] = c.input.source;
  // Native-resolution towers (fovea/native.hpp): Qwen2-VL / 2.5-VL / 3-VL (merge_size > 0) and
  // SigLIP 2 NaFlex (max_num_patches > 0); fovea.encode routes by these.
  d["native_resolution"] = c.native.enabled();
  d["naflex"] = c.native.naflex();
  d["merge_size"] = c.native.merge;
  d["temporal_patch_size"] = c.native.enabled() ? c.native.temporal_patch : 0;
  d["min_pixels"] = c.native.enabled() ? c.native.min_pixels : 0;
  d["max_pixels"] = c.native.enabled() ? c.native.max_pixels : 0;
  d["max_num_patches"] = c.native.max_num_patches;
  d["video_min_pixels"] = c.native.enabled() ? c.native.video_min_pixels : 0;
  d["video_max_pixels"] = c.native.enabled() ? c.native.video_max_pixels : 0;
  d["video_pixels_over_frames"] = c.native.enabled() && c.native.video_limits_over_frames;
  return d;
}

// ---- files -----------------------------------------------------------------------------------

struct PyTensorFile {
  std::shared_ptr<SafetensorsFile> file;
};

py::object file_tensor(const py::object& self, const std::string& name) {
  const PyTensorFile& f = self.cast<const PyTensorFile&>();
  const SafetensorsFile::Entry* e = f.file->find(name);
  if (!e) throw py::key_error(name);
  if (e->dtype_known && e->dtype != DType::bf16) {
    // A read-only view on the mapped file.
    std::vector<py::ssize_t> shape(e->shape.begin(), e->shape.end());
    py::array a(numpy_dtype(e->dtype), shape, {}, f.file->data(*e).data(), self);
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return a;
  }
  return tensor_array(f.file->load_f32(*e));  // BF16 and friends: numpy has no dtype, f32 copy
}


// ---- video ---------------------------------------------------------------------------------

// A decoded frame's planes, owned by the numpy array that views them. When the array dies the
// buffer goes back to its reader's pool, so steady-state decoding allocates nothing.
struct FramePool {
  std::mutex mu;
  std::vector<ImageU8> free;
  ImageU8 take() {
    std::lock_guard lock(mu);
    if (free.empty()) return {};
    ImageU8 img = std::move(free.back());
    free.pop_back();
    return img;
  }
};

struct OwnedFrame {
  ImageU8 img;
  std::weak_ptr<FramePool> pool;
  ~OwnedFrame() {
    if (auto p = pool.lock()) {
      std::lock_guard lock(p->mu);
      if (p->free.size() < 4) p->free.push_back(std::move(img));
    }
  }
};

// [H, W, 3] uint8 (or [H, W] gray): a view on the planar frame, strides (row, 1, plane).
py::array frame_array(ImageU8&& img, const std::shared_ptr<FramePool>& pool) {
  auto* owned = new OwnedFrame{std::move(img), pool};
  py::capsule owner(owned, [](void* p) { delete static_cast<OwnedFrame*>(p); });
  const ImageU8& im = owned->img;
  const py::ssize_t H = im.height(), W = im.width(), C = im.channels();
  if (C == 1)
    return py::array(py::dtype::of<uint8_t>(), {H, W}, {py::ssize_t(im.stride()), py::ssize_t(1)}, im.plane(0), owner);
  return py::array(py::dtype::of<uint8_t>(), {H, W, C},
                   {py::ssize_t(im.stride()), py::ssize_t(1), py::ssize_t(im.plane_stride())}, im.plane(0), owner);
}

py::dict info_dict(const VideoInfo& i) {
  py::dict d;
  d["width"] = i.width;
  d["height"] = i.height;
  d["fps"] = i.fps;
  d["duration_s"] = i.duration_s;
  d["frame_count"] = i.frame_count;
  d["container"] = i.container;
  d["codec"] = i.codec;
  d["orientation"] = i.orientation;
  d["rotation"] = std::string(orientation_name(i.orientation));
  d["rotation_applied"] = i.rotation_applied;
  d["sample_aspect_ratio"] = py::make_tuple(i.sar_num, i.sar_den);
  return d;
}


// libav* objects are freed with the GIL released: freeing a decoder joins its frame threads,
// and those may be logging through a log callback that takes the GIL (PyAV installs one when
// it is imported), which would wait forever on a GIL this thread holds.
struct FreeWithoutGil {
  void operator()(VideoReader* r) const {
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      delete r;
    } else {
      delete r;
    }
  }
};
using ReaderPtr = std::unique_ptr<VideoReader, FreeWithoutGil>;

struct PyVideoReader {
  ReaderPtr reader;
  std::shared_ptr<FramePool> pool = std::make_shared<FramePool>();
  std::mutex mu;  // one read at a time (the GIL is released while decoding)
  FrameFilter keep;  // fovea::frame_sampler: the CLI's --every / --fps rule
  int64_t max_frames = 0, returned = 0;
  std::vector<std::string> warnings;
};

struct PyFrameResult {
  FrameResult r;
};


Reuse parse_reuse(const std::optional<std::string>& r, bool have_model) {
  if (!r) return have_model ? Reuse::incremental : Reuse::exact;
  if (*r == "off") return Reuse::off;
  if (*r == "exact") return Reuse::exact;
  if (*r == "incremental") return Reuse::incremental;
  throw fovea::invalid_argument("reuse must be 'incremental', 'exact' or 'off', got '" + *r + "'");
}

// fovea.VideoSession: frames handed in one at a time (a camera, a service's session) instead of
// decoded from a file; each goes through fovea::VideoSession::process, re-doing only what changed.
struct PyVideoSession {
  std::unique_ptr<VitModel> model;  // the session points at it: a stable address
  std::unique_ptr<Executor> ex;
  std::unique_ptr<VideoSession> session;
  std::mutex mu;  // one frame at a time (the GIL is released while a frame is processed)
  int64_t frames = 0;
};

std::unique_ptr<PyVideoSession> video_session_py(const py::object& model, int budget, std::optional<int> patch,
                                                 const std::optional<std::string>& reuse, int keyframe, float threshold,
                                                 float token_threshold, float hysteresis, float refresh_fraction,
                                                 const std::string& precision, int threads, const std::string& dtype,
                                                 float exact_above_work, const std::string& foveation,
                                                 std::optional<int> window_grid, bool keep_covered) {
  auto out = std::make_unique<PyVideoSession>();
  std::optional<VitModel> vit;
  if (!model.is_none()) vit = cast_arg<VitModel>(model, "model must be a fovea.Model or None");
  std::string prep;
  VideoParams vp;
  vp.tokenize = build_params(budget, patch, false, -1, {}, std::nullopt, std::nullopt, dtype, std::nullopt, std::nullopt,
                             true, vit, std::nullopt, std::nullopt, std::nullopt, std::nullopt, prep, foveation,
                             window_grid, keep_covered);
  if (keyframe < 0) throw fovea::invalid_argument("keyframe must be >= 0");
  if (!(threshold >= 0) || !std::isfinite(threshold)) throw fovea::invalid_argument("threshold must be a number >= 0");
  if (!(token_threshold >= 0) || !std::isfinite(token_threshold)) throw fovea::invalid_argument("token_threshold must be >= 0");
  if (!(hysteresis >= 0)) throw fovea::invalid_argument("hysteresis must be >= 0");
  if (!(refresh_fraction > 0 && refresh_fraction <= 1)) throw fovea::invalid_argument("refresh_fraction must be in (0, 1]");
  if (vit && vp.tokenize.extract.dtype == DType::u8)
    throw fovea::invalid_argument("dtype 'u8' patches are not normalised; a model needs 'f32' or 'f16'");
  vp.reuse = parse_reuse(reuse, vit.has_value() && vp.tokenize.foveation != Foveation::windows);
  vp.change_threshold = threshold;
  vp.keyframe_interval = keyframe;
  vp.layout_hysteresis = hysteresis;
  vp.refresh_fraction = refresh_fraction;
  vp.encoder.precision = parse_video_precision(precision);
  if (vit) warn_if_precision_falls_back(vp.encoder.precision);
  vp.encoder.token_threshold = token_threshold;
  if (!(exact_above_work >= 0) || !std::isfinite(exact_above_work))
    throw fovea::invalid_argument("exact_above_work must be a number >= 0");
  vp.exact_above_work = exact_above_work;
  const ExecConfig cfg = exec_config(threads);
  if (vit) out->model = std::make_unique<VitModel>(*vit);
  py::gil_scoped_release nogil;
  out->ex = std::make_unique<Executor>(cfg);
  out->session = std::make_unique<VideoSession>(vp, out->model.get(), *out->ex);
  return out;
}

std::unique_ptr<PyFrameResult> video_session_process(PyVideoSession& s, const py::array& image,
                                                     const std::vector<std::vector<float>>& fixations,
                                                     const std::vector<std::vector<float>>& regions,
                                                     std::optional<int64_t> index, double pts) {
  const ImageViewU8 v = array_view(image);  // the frame is copied: the session keeps it as its reference
  const Query q = make_query(fixations, regions);
  auto out = std::make_unique<PyFrameResult>();
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(s.mu);
  ImageU8 frame(v.width(), v.height(), v.channels());
  for (int c = 0; c < v.channels(); ++c)
    for (int y = 0; y < v.height(); ++y) {
      uint8_t* d = frame.row(c, y);
      for (int x = 0; x < v.width(); ++x) d[x] = v.at(c, y, x);
    }
  out->r = s.session->process(std::move(frame), q, index ? *index : s.frames, pts);
  ++s.frames;
  return out;
}

// fovea.video's loop: the hooks fovea::run_video calls (with the GIL released; the ones that
// touch Python objects take it) and what they gather: the per-frame results (without output=),
// the reader's warnings and overlay='s contact sheet.
struct PyVideoLoop {
  const std::string& path;
  const py::object& fixations;  // a callable (index, pts) -> fixations when per_frame_query
  const bool per_frame_query;
  const Query& base;
  const std::optional<std::string>& out_path;
  Executor& ex;
  std::optional<std::string> sheet_path;  // overlay=: the CLI's --overlay contact sheet
  std::optional<VideoSheet> sheet;
  std::optional<AtomicFile> sheet_file;  // opened now: an unwritable path fails before the run
  int64_t frames_in = 0, frames_out = 0;
  py::list results, warnings;

  PyVideoLoop(const std::string& p, const py::object& fx, bool per_frame, const Query& q,
              const std::optional<std::string>& out, Executor& e, const py::object& overlay)
      : path(p), fixations(fx), per_frame_query(per_frame), base(q), out_path(out), ex(e),
        sheet_path(overlay.is_none() ? std::nullopt : std::optional<std::string>(fs_path(overlay))) {
    if (sheet_path) sheet.emplace(), sheet_file.emplace(*sheet_path);
  }

  // The loop is the CLI's (fovea::run_video): the same frames, queries and output file.
  VideoRunOptions options(int64_t max_frames, int every, double fps, const std::string& model_name,
                          const std::string& prep) {
    VideoRunOptions o;
    o.source = path;
    o.max_frames = max_frames;
    o.keep = frame_sampler(every, fps);
    o.query = base;
    if (per_frame_query) o.frame_query = [this](const VideoFrame& frame) { return frame_query(frame); };
    if (out_path) o.output = *out_path;
    if (sheet)
      o.on_input = [this](const VideoFrame& f, const Query&) { sheet->add_frame(frames_in++, f.image, f.index, f.pts_s, ex); };
    o.model_name = model_name;
    o.preprocessing_source = prep;
    o.on_warning = [this](const std::string& w) {
      py::gil_scoped_acquire gil;
      warnings.append(path + ": " + w);
    };
    o.after_push = [] {  // Ctrl-C between frames
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    };
    return o;
  }

  // fixations(index, pts): the frame's fixations, over the fixed regions.
  Query frame_query(const VideoFrame& frame) const {
    py::gil_scoped_acquire gil;
    const py::object f = fixations(frame.index, frame.pts_s);
    std::vector<std::vector<float>> v;
    try {
      v = f.cast<std::vector<std::vector<float>>>();
    } catch (const py::cast_error&) {
      throw py::type_error("fixations(index, pts) must return a list of (x, y[, radius[, weight]]), got " +
                           std::string(py::str(py::type::of(f).attr("__name__"))));
    }
    Query q = base;
    q.fixations = make_query(v, {}).fixations;
    return q;
  }

  // A finished frame: onto the sheet, and into the results when no file is written.
  void keep_result(FrameResult& r) {
    if (sheet) sheet->add_tokens(frames_out++, r.batch, r.recomputed, r.refresh);
    if (out_path) return;
    auto pr = std::make_unique<PyFrameResult>();
    pr->r = std::move(r);
    py::gil_scoped_acquire gil;
    results.append(py::cast(std::move(pr)));
  }

  void write_sheet() {
    if (sheet) {
      sheet_file->write(encode_png(sheet->render()));
      sheet_file->commit();
    }
  }

  // What fovea.video returns with output=: the run's summary.
  py::dict run_summary(const VideoRunStats& run, const VideoInfo& info, const VideoReader& reader,
                   const VideoParams& vp) const {
    const int64_t processed = run.frames, tokens_total = run.tokens, recomputed_total = run.recomputed_tokens;
    const double ms_total = run.session_ms;
    const bool approximate = run.approximate;
    py::dict summary;
    summary["frames"] = processed;
    summary["video"] = info_dict(info);
    summary["frames_decoded"] = reader.frames_decoded();
    summary["corrupt_packets"] = reader.corrupt_packets();
    summary["corrupt_frames"] = reader.corrupt_frames();
    summary["timestamps_repaired"] = reader.timestamps_repaired();
    summary["reuse"] = std::string(to_string(vp.reuse));
    summary["approximate"] = approximate;
    summary["tokens"] = tokens_total;
    summary["recomputed_tokens"] = recomputed_total;
    summary["reuse_rate"] = tokens_total ? 1.0 - double(recomputed_total) / double(tokens_total) : 0.0;
    summary["mean_ms"] = ms_total / double(processed);
    summary["warnings"] = warnings;
    summary["output"] = *out_path;
    if (sheet) summary["overlay"] = py::dict(py::arg("path") = *sheet_path, py::arg("frames") = sheet->shown_frames());
    return summary;
  }
};

// fovea.video: `fovea video`'s loop (fovea::run_video, as tools/fovea/cmd_video.cpp calls it) with
// the GIL released; into the CLI's file (output=) or a list of per-frame results.
py::object video_py(const py::object& path_obj, const py::object& model, int budget, const py::object& fixations,
                    const std::vector<std::vector<float>>& regions, int every, double fps, int64_t max_frames,
                    const std::optional<std::string>& reuse, int keyframe, int group, float threshold, float token_threshold,
                    float hysteresis, float refresh_fraction, const std::string& precision, int threads,
                    const py::object& output, std::optional<int> patch, const std::string& dtype, int max_level,
                    const std::map<std::string, float>& weights, std::optional<float> e0, std::optional<float> sharpness,
                    std::optional<std::vector<float>> mean, std::optional<std::vector<float>> std_, bool normalize,
                    std::optional<float> fine_bias, std::optional<float> detail_focus,
                    std::optional<float> fixation_spread, std::optional<int> lookahead, uint64_t max_pixels, bool quiet,
                    bool autorotate, const py::object& overlay, float exact_above_work, const std::string& foveation,
                    std::optional<int> window_grid, bool keep_covered) {
  const std::string path = fs_path(path_obj);
  std::optional<VitModel> vit;
  if (!model.is_none()) vit = cast_arg<VitModel>(model, "model must be a fovea.Model or None");
  const bool have_model = vit.has_value();
  std::string prep;
  VideoParams vp;
  vp.tokenize = build_params(budget, patch, false, max_level, weights, e0, sharpness, dtype, mean, std_, normalize, vit,
                             fine_bias, detail_focus, fixation_spread, lookahead, prep, foveation, window_grid, keep_covered);
  if (every < 0) throw fovea::invalid_argument("every must be >= 1");
  if (every > 0 && fps > 0) throw fovea::invalid_argument("every and fps are exclusive");
  if (fps < 0 || !std::isfinite(fps)) throw fovea::invalid_argument("fps must be > 0");
  if (max_frames < 0) throw fovea::invalid_argument("max_frames must be >= 1");
  if (keyframe < 0) throw fovea::invalid_argument("keyframe must be >= 0");
  if (group < 1 || group > 1024) throw fovea::invalid_argument("group must be 1..1024 frames");
  if (!(threshold >= 0) || !std::isfinite(threshold)) throw fovea::invalid_argument("threshold must be a number >= 0");
  if (!(token_threshold >= 0) || !std::isfinite(token_threshold)) throw fovea::invalid_argument("token_threshold must be >= 0");
  if (!(hysteresis >= 0)) throw fovea::invalid_argument("hysteresis must be >= 0");
  if (!(refresh_fraction > 0 && refresh_fraction <= 1)) throw fovea::invalid_argument("refresh_fraction must be in (0, 1]");
  if (have_model && vp.tokenize.extract.dtype == DType::u8)
    throw fovea::invalid_argument("dtype 'u8' patches are not normalised; a model needs 'f32' or 'f16'");
  // The windows foveation reuses whole windows (exact) unless asked otherwise.
  vp.reuse = parse_reuse(reuse, have_model && vp.tokenize.foveation != Foveation::windows);
  vp.change_threshold = threshold;
  vp.keyframe_interval = keyframe;
  vp.group_frames = group;
  vp.layout_hysteresis = hysteresis;
  vp.refresh_fraction = refresh_fraction;
  vp.encoder.precision = parse_video_precision(precision);
  if (have_model) warn_if_precision_falls_back(vp.encoder.precision);
  vp.encoder.token_threshold = token_threshold;
  if (!(exact_above_work >= 0) || !std::isfinite(exact_above_work))
    throw fovea::invalid_argument("exact_above_work must be a number >= 0");
  vp.exact_above_work = exact_above_work;
  const bool per_frame_query = PyCallable_Check(fixations.ptr());
  Query base = make_query(per_frame_query ? std::vector<std::vector<float>>{}
                                          : cast_arg<std::vector<std::vector<float>>>(
                                                fixations, "fixations must be a list of (x, y[, radius[, weight]]) or a callable"),
                         regions);
  const std::optional<std::string> out_path =
      output.is_none() ? std::nullopt : std::optional<std::string>(fs_path(output));
  const ExecConfig cfg = exec_config(threads);

  if (quiet) quiet_ffmpeg_log();
  VideoReaderOptions ro;
  ro.max_pixels = max_pixels;
  ro.autorotate = autorotate;
  ReaderPtr reader;
  std::unique_ptr<Executor> ex;
  std::unique_ptr<VideoSession> session;
  {
    py::gil_scoped_release nogil;
    reader = ReaderPtr(new VideoReader(VideoReader::open(path, ro)));
    ex = std::make_unique<Executor>(cfg);
    session = std::make_unique<VideoSession>(vp, vit ? &*vit : nullptr, *ex);
  }
  const VideoInfo info = reader->info();
  PyVideoLoop loop(path, fixations, per_frame_query, base, out_path, *ex, overlay);
  const VideoRunOptions ro_run = loop.options(max_frames, every, fps, have_model ? vit->source() : std::string(), prep);
  VideoRunStats run;
  {
    py::gil_scoped_release nogil;
    run = run_video(*reader, *session, ro_run, [&loop](FrameResult& r, const VideoRunStats&) { loop.keep_result(r); });
    loop.write_sheet();
  }
  if (!out_path) return loop.results;
  return loop.run_summary(run, info, *reader, vp);
}

// A WebDataset shard read by the library's reader (fovea/tar.hpp): its regular members whose
// names end with one of `suffixes` (any case; every member when empty), in archive order.
struct PyTarReader {
  std::unique_ptr<TarReader> reader;
  std::vector<std::string> suffixes;

  bool wanted(const std::string& name) const {
    if (suffixes.empty()) return true;
    std::string l = name;
    for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const std::string& s : suffixes)
      if (l.size() >= s.size() && l.compare(l.size() - s.size(), s.size(), s) == 0) return true;
    return false;
  }
};

// ---- Tokens --------------------------------------------------------------------------------
// fovea.Tokens' arrays, each a view into the result (no copy) but boxes: patches, positions,
// levels, the rate map, the relevance map.
void def_token_arrays(py::class_<PyTokens>& c) {
  c.def_property_readonly(
          "patches", [](py::object self) { return tensor_view(self.cast<PyTokens&>().t.batch.patches, self); },
          "[N, 3, P, P] float32 (normalised), float16 or uint8: one patch per token, a view (no copy)")
      .def_property_readonly(
          "positions", [](py::object self) { return tensor_view(self.cast<PyTokens&>().t.batch.positions, self); },
          "[N, 4] float32: centre x, centre y, side (pixels of the original image), level")
      .def_property_readonly(
          "levels", [](py::object self) { return tensor_view(self.cast<PyTokens&>().t.batch.levels, self); },
          "[N] int32: mip level of each token (sorted by level)")
      .def_property_readonly(
          "rate_map",
          [](py::object self) {
            const PyTokens& t = self.cast<PyTokens&>();
            const TileGrid& g = t.t.relevance.grid;
            return vector_view(t.t.allocation.rate_map.level, {g.tiles_y, g.tiles_x}, self);
          },
          "[tiles_y, tiles_x] uint8: per finest tile, the level covering it (the shading-rate image)")
      .def_property_readonly(
          "relevance",
          [](py::object self) {
            const PyTokens& t = self.cast<PyTokens&>();
            const TileGrid& g = t.t.relevance.grid;
            return vector_view(t.t.relevance.score, {g.tiles_y, g.tiles_x}, self);
          },
          "[tiles_y, tiles_x] float32: the score the allocation followed")
      .def_property_readonly(
          "boxes",
          [](const PyTokens& t) {
            const auto& b = t.t.batch.boxes;
            py::array_t<float> a({py::ssize_t(b.size()), py::ssize_t(4)});
            if (!b.empty()) std::memcpy(a.mutable_data(), b.data(), b.size() * sizeof(b[0]));
            return a;
          },
          "[N, 4] float32: each token's box [x0, y0, x1, y1) in original pixels (a copy)");
}

// fovea.Tokens' description: the image, the budget, the foveation and its windows, the source,
// the file metadata and the timings.
void def_token_layout(py::class_<PyTokens>& c) {
  c.def_property_readonly("query_outside", [](const PyTokens& t) { return query_outside(t.query, t.width, t.height); },
                             "The fixations and regions wholly outside the image (fovea.tokenize warns about each)")
      .def_property_readonly("image_size", [](const PyTokens& t) { return py::make_tuple(t.width, t.height); },
                             "(width, height) of the tokenized image")
      .def_property_readonly("patch_size", [](const PyTokens& t) { return t.params.patch_px; })
      .def_property_readonly("budget", [](const PyTokens& t) { return t.params.alloc.budget_tokens; })
      .def_property_readonly("mode", [](const PyTokens& t) { return t.t.mode(); },
                             "'foveated' (the mixed foveation), 'windows' or 'uniform'")
      .def_property_readonly(
          "foveation",
          [](const PyTokens& t) { return t.t.is_uniform() ? std::string("uniform") : std::string(to_string(t.params.foveation)); },
          "'windows', 'mixed' or 'uniform'")
      .def_property_readonly(
          "window",
          [](py::object self) -> py::object {
            const PyTokens& t = self.cast<PyTokens&>();
            return t.t.batch.windowed() ? py::object(tensor_view(t.t.batch.window, self)) : py::none();
          },
          "foveation='windows': [N] int32, the window of each token (else None)")
      .def_property_readonly(
          "covered",
          [](py::object self) -> py::object {
            const PyTokens& t = self.cast<PyTokens&>();
            return t.t.batch.windowed() ? py::object(tensor_view(t.t.batch.covered, self)) : py::none();
          },
          "foveation='windows': [N] uint8, 1 for a token a finer window covers: encoded as context, then dropped "
          "(else None)")
      .def_property_readonly("tokens_kept", [](const PyTokens& t) { return t.t.batch.kept(); },
                             "Tokens handed on after encoding (len() minus the covered ones)")
      .def_property_readonly(
          "windows",
          [](const PyTokens& t) {
            py::list l;
            for (size_t i = 0; i < t.t.batch.windows.size(); ++i) {
              const TokenWindow& w = t.t.batch.windows[i];
              py::dict d;
              d["kind"] = std::string(to_string(w.kind));
              d["box"] = py::make_tuple(w.box[0], w.box[1], w.box[2], w.box[3]);
              d["grid"] = py::make_tuple(w.grid_x, w.grid_y);
              d["level"] = w.level;
              d["scale"] = w.scale;
              l.append(d);
            }
            return l;
          },
          "foveation='windows': one dict per window (kind 'base', 'query' or 'detail'; box (x0, y0, x1, y1) in image "
          "pixels; grid (tokens across, down); level: the mip level sampled, -1 for the resized base view; scale: "
          "image pixels per window pixel); [] otherwise")
      .def_property_readonly("source", [](const PyTokens& t) { return fs_str(t.source); })
      .def_property_readonly("metadata", [](const PyTokens& t) { return to_dict(token_metadata(t.t, t.query, t.params)); },
                             "The token file's __metadata__ (all strings)")
      .def_property_readonly(
          "timings",
          [](const PyTokens& t) {
            py::dict d;
            d["pyramid_ms"] = t.t.timings.pyramid_ms;
            d["relevance_ms"] = t.t.timings.relevance_ms;
            d["allocate_ms"] = t.t.timings.allocate_ms;
            d["extract_ms"] = t.t.timings.extract_ms;
            d["total_ms"] = t.t.timings.total_ms();
            return d;
          },
          "Per-stage wall times in milliseconds");
}

// fovea.Tokens' outputs: what the model sees, the overlay, the token file (saved or as bytes).
void def_token_outputs(py::class_<PyTokens>& c) {
  c.def(
          "seen",
          [](const PyTokens& t, int threads) {
            ImageU8 img;
            {
              py::gil_scoped_release nogil;
              Executor ex(exec_config(threads));
              img = reconstruct(t.t.batch, t.width, t.height, ex);
            }
            return to_hwc(img);
          },
          py::arg("threads") = 0, "What the model sees: [H, W, 3] uint8, every patch stretched over its box")
      .def(
          "overlay",
          [](const PyTokens& t) {
            ImageU8 img;
            {
              py::gil_scoped_release nogil;
              img = render_overlay(t.t.pyramid.view(0), t.t.relevance, t.t.batch);
            }
            return to_hwc(img);
          },
          "[H, W, 3] uint8: token borders coloured by level over a relevance heat map")
      .def(
          "save",
          [](const PyTokens& t, const py::object& path) {
            const std::string p = fs_path(path);
            py::gil_scoped_release nogil;
            save_tokens(p, t.t, t.query, t.params, {{"source", t.source}, {"preprocessing_source", t.preprocessing_source}});
          },
          py::arg("path"), "Write the token file `fovea tokenize -o` writes (atomically)")
      .def(
          "to_bytes",
          [](const PyTokens& t) {
            std::vector<uint8_t> b;
            {
              py::gil_scoped_release nogil;
              b = serialize_tokens(t.t, t.query, t.params, {{"source", t.source}, {"preprocessing_source", t.preprocessing_source}});
            }
            return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
          },
          "The bytes save() writes (the token file of `fovea tokenize -o`), made in memory")
      .def("__len__", [](const PyTokens& t) { return t.t.batch.size(); })
      .def("__repr__", [](const PyTokens& t) {
        return "<fovea.Tokens " + std::to_string(t.t.batch.size()) + " tokens, " +
               (t.t.is_windowed() ? std::to_string(t.t.batch.windows.size()) + " windows (" +
                                        std::to_string(t.t.batch.kept()) + " kept)"
                                  : std::string(t.t.mode())) +
               ", budget " + std::to_string(t.params.alloc.budget_tokens) +
               ", " + std::to_string(t.width) + "x" + std::to_string(t.height) + ", source " + t.source + ">";
      });
}

void bind_tokens(py::module_& m) {
  py::class_<PyTokens> c(m, "Tokens", "A budgeted set of multi-scale patches (see fovea.tokenize).");
  def_token_arrays(c);
  def_token_layout(c);
  def_token_outputs(c);
}

// ---- module functions: image formats, CPU features, decode / encode, tokenize --------------------
void bind_functions(py::module_& m) {
  m.def("image_formats", [] { return std::string(image_formats()); },
        "The image formats this build decodes: 'PNG, JPEG', and with FFmpeg WebP, GIF, BMP, TIFF, ...");
  m.def("image_extensions", [] { return image_file_extensions(); },
        "The file name extensions of those formats ('.png', '.webp', ...), lower case with the dot.");
  m.def("bf16_supported", &bf16_supported,
        "Whether this CPU has native bf16 matrix kernels (AVX512-BF16 or AMX). Without them precision='bf16' runs fp32.");
  m.def("int8_supported", &int8_supported,
        "Whether this CPU has int8 vector kernels (AVX512-VNNI, AVX-VNNI or AVX2). Without them precision='int8' runs "
        "fp32.");
  m.def("matrix_kernels", [](const std::string& p) { return std::string(matrix_kernels(parse_precision(p))); },
        "The matrix kernels an encode at this precision runs, e.g. 'int8-vnni512+avx512bf16+onednn'.");
  m.def("amx_kernels_enabled", &encoder_detail::amx_kernels_enabled,
        "Whether precision='bf16' runs its linear layers and attention on fovea's own AMX tile kernels (a CPU with "
        "AMX; FOVEA_AMX=0 turns them off) rather than oneDNN's.");
  m.def("avx512bf16_kernels_enabled", &encoder_detail::avx512bf16_kernels_enabled,
        "Whether precision='bf16' runs attention on fovea's own AVX512-BF16 kernel (a CPU with AVX512-BF16 where the "
        "AMX kernels do not run; FOVEA_AVX512BF16=0 turns it off) rather than oneDNN's matmuls.");
  m.def("avx2_kernels_enabled", &encoder_detail::avx2_kernels_enabled,
        "Whether precision='fp32' runs its linear layers on fovea's own AVX2 + FMA kernel (a CPU where oneDNN has no "
        "f32 brgemm, i.e. without AVX-512; FOVEA_AVX2=0 turns it off) rather than oneDNN's.");

  m.def(
      "encode_image",
      [](const py::array& image, const std::string& format, int quality, int max_side) {
        if (format != "png" && format != "jpeg") throw fovea::invalid_argument("format must be 'png' or 'jpeg', got '" + format + "'");
        if (quality < 1 || quality > 100) throw fovea::invalid_argument("quality must be in [1, 100]");
        if (max_side < 0) throw fovea::invalid_argument("max_side must be >= 0");
        const ImageViewU8 v = array_view(image);  // `image` keeps the pixels alive below
        std::vector<uint8_t> out;
        {
          py::gil_scoped_release nogil;
          const int w = v.width(), h = v.height(), side = std::max(w, h);
          ImageU8 img;
          if (max_side > 0 && side > max_side) {
            Executor ex(exec_config(1));
            img = resize_area(v, std::max(1, int(int64_t(w) * max_side / side)), std::max(1, int(int64_t(h) * max_side / side)), ex);
          } else {
            img = to_image(v);
          }
          out = format == "png" ? encode_png(img) : encode_jpeg(img, quality);
        }
        return py::bytes(reinterpret_cast<const char*>(out.data()), out.size());
      },
      py::arg("image"), py::arg("format") = "png", py::arg("quality") = 90, py::arg("max_side") = 0,
      "An [H, W, 3] or [H, W] uint8 array as a PNG or JPEG file's bytes; max_side > 0 first shrinks it (area "
      "filter) to fit a max_side square");
  m.def(
      "decode_image",
      [](const py::bytes& data, uint64_t max_pixels, bool exif, const std::string& name) {
        const std::string_view sv = data;
        ImageU8 img;
        {
          py::gil_scoped_release nogil;
          LoadOptions lo;
          lo.max_pixels = max_pixels;
          lo.apply_exif_orientation = exif;
          img = decode_image({reinterpret_cast<const uint8_t*>(sv.data()), sv.size()}, lo, name);
        }
        return to_hwc(img);
      },
      py::arg("data"), py::arg("max_pixels") = 100'000'000, py::arg("exif") = true, py::arg("name") = "<bytes>",
      "An image file's bytes decoded as fovea reads them: [H, W, 3] or [H, W, 1] uint8");
  m.def("tokenize", &tokenize_py, py::arg("image"), py::arg("budget") = py::none(),
        py::arg("fixations") = std::vector<std::vector<float>>{}, py::arg("regions") = std::vector<std::vector<float>>{},
        py::arg("patch") = py::none(), py::arg("uniform") = false, py::arg("threads") = 0, py::arg("max_level") = -1,
        py::arg("weights") = std::map<std::string, float>{}, py::arg("e0") = py::none(), py::arg("sharpness") = py::none(),
        py::arg("dtype") = "f32", py::arg("mean") = py::none(), py::arg("std") = py::none(), py::arg("normalize") = true,
        py::arg("query_embedding") = py::none(), py::arg("model") = py::none(),
        py::arg("max_pixels") = LoadOptions{}.max_pixels, py::arg("source") = "", py::arg("fine_bias") = py::none(),
        py::arg("detail_focus") = py::none(), py::arg("fixation_spread") = py::none(), py::arg("lookahead") = py::none(),
        py::arg("exif") = true, py::arg("foveation") = "", py::arg("window_grid") = py::none(),
        py::arg("keep_covered") = false);

}

// ---- Model / Encoding ----------------------------------------------------------------------
// An Encoding's tensor `field` as an array viewing it (kept alive by self), or None when the model
// made no such output.
template <Tensor Encoding::*field>
py::object optional_tensor(py::object self) {
  const Tensor& t = self.cast<PyEncoding&>().e.*field;
  return t.rank() ? py::object(tensor_view(t, self)) : py::none();
}

// What the encoder computed: the hidden states and the model's heads.
void bind_encoding_outputs(py::class_<PyEncoding>& c) {
  c.def_property_readonly("embeddings",
                          [](py::object self) { return tensor_view(self.cast<PyEncoding&>().e.embeddings, self); },
                          "[N, D] float32: last hidden state of every token, in token order")
      .def_property_readonly("class_token", &optional_tensor<&Encoding::class_token>, "[1, D] float32 or None")
      .def_property_readonly("pooled", &optional_tensor<&Encoding::pooled>,
          "[1, D] float32 or None. What it is depends on the model (Model.pooled_output, and the saved file's "
          "'pooled_output' metadata): CLIP post_layernorm(class token), SigLIP's attention-pool head, HF ViTModel's "
          "tanh(pooler.dense(...)); for an HF ViT classifier, torchvision, timm, DINOv2 or open_clip it is the "
          "class token itself, identical to class_token (the final LayerNorm applies to every token, no pooler)")
      .def_property_readonly("image_embeds", &optional_tensor<&Encoding::image_embeds>,
                             "[1, E] float32 (CLIP visual projection) or None")
      .def_property_readonly("logits", &optional_tensor<&Encoding::logits>,
          "[1, K] float32 (torchvision / timm head, HF ViT classifier) or None")
      .def_property_readonly("projected", &optional_tensor<&Encoding::projected>,
          "[N, E] float32: the projector's output, what the language model consumes (LLaVA / mmproj), or None");
}

// Which tokens the embeddings are, and where they lie (the Tokens they came from).
void bind_encoding_tokens(py::class_<PyEncoding>& c) {
  c.def_property_readonly(
          "rows",
          [](const PyEncoding& e) -> py::object {
            if (e.e.rows.empty()) return py::none();
            py::array_t<int64_t> a(py::ssize_t(e.e.rows.size()));
            std::memcpy(a.mutable_data(), e.e.rows.data(), e.e.rows.size() * sizeof(int64_t));
            return a;
          },
          "foveation='windows': [N] int64, the Tokens rows the embeddings are (the tokens no finer window covers); "
          "None otherwise (every row, in order)")
      .def_property_readonly(
          "positions",
          [](const PyEncoding& e) -> py::object {
            if (e.tokens.is_none()) return py::none();
            const TokenBatch& b = e.tokens.cast<const PyTokens&>().t.batch;
            const int64_t n = e.e.embeddings.rank() ? e.e.embeddings.dim(0) : 0;
            py::array_t<float> a({py::ssize_t(n), py::ssize_t(4)});
            for (int64_t i = 0; i < n; ++i) {
              const int64_t r = e.e.rows.empty() ? i : e.e.rows[size_t(i)];
              std::memcpy(a.mutable_data() + i * 4, b.positions.data<float>() + r * 4, 16);
            }
            return a;
          },
          "[N, 4] float32: centre x, centre y, side, level of every embedding's token (a copy); None when the "
          "patches came as an array")
      .def_property_readonly(
          "window",
          [](const PyEncoding& e) -> py::object {
            if (e.tokens.is_none() || e.e.rows.empty()) return py::none();
            const TokenBatch& b = e.tokens.cast<const PyTokens&>().t.batch;
            py::array_t<int32_t> a(py::ssize_t(e.e.rows.size()));
            for (size_t i = 0; i < e.e.rows.size(); ++i) a.mutable_data()[i] = b.window.data<int32_t>()[e.e.rows[i]];
            return a;
          },
          "foveation='windows': [N] int32, the window of every embedding's token (Tokens.windows); None otherwise")
      .def_property_readonly("window_class_tokens", &optional_tensor<&Encoding::window_class_tokens>,
          "foveation='windows': [W, D] float32, every window's class token (row 0 the base view's, which "
          "class_token, pooled and logits come from); None otherwise");
}

// How the encode ran: its time, precision and attention.
void bind_encoding_run(py::class_<PyEncoding>& c) {
  c.def_property_readonly("encode_ms", [](const PyEncoding& e) { return e.e.encode_ms; })
      .def_property_readonly("attention_ms", [](const PyEncoding& e) { return e.e.attention_ms; },
                             "of encode_ms: every layer's attention op (for hierarchical attention also its ranking)")
      .def_property_readonly(
          "precision", [](const PyEncoding& e) { return std::string(to_string(e.e.precision)); },
          "'fp32' or 'bf16': what ran (bf16 runs fp32 on a CPU without bf16 kernels; fovea.bf16_supported())")
      .def_property_readonly("attention", [](const PyEncoding& e) { return to_string(e.attention); },
                             "'exact' or 'hierarchical:K:B' (an experimental approximation; a saved file's "
                             "'attention' metadata adds what it cost on a real tower)");
}

// The embeddings file `fovea encode -o` writes, and the length.
void bind_encoding_files(py::class_<PyEncoding>& c) {
  c.def(
          "save",
          [](const PyEncoding& e, const py::object& path) {
            if (e.tokens.is_none()) throw fovea::invalid_argument("save needs the Tokens the encoding came from (encode a Tokens object)");
            const PyTokens& t = e.tokens.cast<const PyTokens&>();
            const std::string p = fs_path(path);
            py::gil_scoped_release nogil;
            // The library's format (fovea/embeddings.hpp), as `fovea encode -o` writes it.
            const EmbeddingsFile file = embeddings_file(t.t.batch, e.e, embeddings_metadata(t, e.model, e.precision, e.attention));
            save_embeddings(p, file);
          },
          py::arg("path"), "Write the embeddings file `fovea encode -o` writes (atomically)")
      .def(
          "to_bytes",
          [](const PyEncoding& e) {
            if (e.tokens.is_none()) throw fovea::invalid_argument("to_bytes needs the Tokens the encoding came from (encode a Tokens object)");
            const PyTokens& t = e.tokens.cast<const PyTokens&>();
            std::vector<uint8_t> b;
            {
              py::gil_scoped_release nogil;
              b = serialize_embeddings(embeddings_file(t.t.batch, e.e, embeddings_metadata(t, e.model, e.precision, e.attention)));
            }
            return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
          },
          "The bytes save() writes (the embeddings file of `fovea encode -o`), made in memory")
      .def("__len__", [](const PyEncoding& e) { return e.e.embeddings.rank() ? e.e.embeddings.dim(0) : 0; });
}

void bind_encoding(py::module_& m) {
  py::class_<PyEncoding> c(m, "Encoding", "Everything the encoder returns for one image (see Model.encode_full).");
  bind_encoding_outputs(c);
  bind_encoding_tokens(c);
  bind_encoding_run(c);
  bind_encoding_files(c);
}

void bind_model(py::module_& m) {
  auto encode_impl = [](const VitModel& model, const py::object& tokens, const std::string& precision, int threads,
                        const py::object& positions, const py::object& image_size, const std::string& attention) {
    auto out = std::make_unique<PyEncoding>();
    out->model = model;
    out->precision = parse_precision(precision);
    warn_if_precision_falls_back(out->precision);
    out->attention = parse_attention(attention);
    const ExecConfig cfg = exec_config(threads);
    EncodeParams ep{.precision = out->precision, .attention = out->attention};
    if (py::isinstance<PyTokens>(tokens)) {
      if (!positions.is_none() || !image_size.is_none())
        throw fovea::invalid_argument("positions and image_size come from the Tokens; pass them only with a patches array");
      const PyTokens& t = tokens.cast<const PyTokens&>();
      if (t.params.extract.dtype == DType::u8)
        throw fovea::invalid_argument("u8 patches are not normalised; tokenize with dtype='f32' or 'f16' to encode");
      ep.image_width = t.width;
      ep.image_height = t.height;
      out->tokens = tokens;
      py::gil_scoped_release nogil;
      Executor ex(cfg);
      out->e = encode_tokens(model, t.t.batch, ep, ex);  // the windows foveation: every window, covered tokens dropped
    } else {
      // Raw arrays: patches [N, C, P, P] float32/float16 and positions [N, 4] float32, read in place.
      if (!py::isinstance<py::array>(tokens)) throw py::type_error("encode takes a fovea.Tokens or a patches array");
      if (positions.is_none() || image_size.is_none())
        throw fovea::invalid_argument("encoding a patches array needs positions= ([N, 4] float32) and image_size=(width, height)");
      py::array pa = tokens.cast<py::array>();
      py::array qa = positions.cast<py::array>();
      const auto pd = fovea_dtype(pa.dtype());
      if (!pd || (*pd != DType::f32 && *pd != DType::f16))
        throw py::type_error("patches must be float32 or float16, got " + std::string(py::str(pa.dtype())));
      if (fovea_dtype(qa.dtype()) != DType::f32)
        throw py::type_error("positions must be float32, got " + std::string(py::str(qa.dtype())));
      if (!(pa.flags() & py::array::c_style) || !(qa.flags() & py::array::c_style))
        throw py::value_error("patches and positions must be C-contiguous; pass np.ascontiguousarray(...)");
      const auto wh = cast_arg<std::pair<int, int>>(image_size, "image_size must be (width, height), two ints below 2^31");
      ep.image_width = wh.first;
      ep.image_height = wh.second;
      TensorView pv(*pd, std::vector<int64_t>(pa.shape(), pa.shape() + pa.ndim()), pa.data());
      TensorView qv(DType::f32, std::vector<int64_t>(qa.shape(), qa.shape() + qa.ndim()), qa.data());
      py::gil_scoped_release nogil;
      Executor ex(cfg);
      out->e = encode(model, pv, qv, ep, ex);
    }
    return out;
  };

  py::class_<VitModel>(m, "Model", "A ViT checkpoint (see fovea.Model).")
      .def(py::init([](const py::object& spec) {
             const std::string s = fs_path(spec);
             py::gil_scoped_release nogil;
             return VitModel::load(s);
           }),
           py::arg("spec"))
      .def_property_readonly("config", [](const VitModel& v) { return config_dict(v.config()); })
      .def_property_readonly("description", [](const VitModel& v) { return fs_str(v.describe()); })
      .def_property_readonly("source", [](const VitModel& v) { return fs_str(v.source()); })
      .def_property_readonly("is_random", &VitModel::is_random)
      .def_property_readonly(
          "pooled_output",
          [](const VitModel& v) -> py::object {
            const std::string p = pooled_output(v);
            return p.empty() ? py::none() : py::object(py::str(p));
          },
          "What Encoding.pooled holds, in words (e.g. 'class_token (identical: the final LayerNorm applies to every "
          "token)'), or None when the model gives no pooled output")
      .def_property_readonly(
          "heads",
          [](const VitModel& v) {
            std::vector<std::string> out;
            for (const ModelHead& h : model_heads(v)) out.push_back(h.describe());
            return out;
          },
          "The heads run after the tower, in words, e.g. ['classifier, 200 classes (logits from the normed class "
          "token)'] (`fovea model`'s head: lines)")
      .def(
          "encode",
          [encode_impl](const VitModel& model, const py::object& tokens, const std::string& precision, int threads,
                        const py::object& positions, const py::object& image_size, const std::string& attention) {
            std::unique_ptr<PyEncoding> e = encode_impl(model, tokens, precision, threads, positions, image_size, attention);
            return tensor_array(std::move(e->e.embeddings));
          },
          py::arg("tokens"), py::arg("precision") = "fp32", py::arg("threads") = 0, py::arg("positions") = py::none(),
          py::arg("image_size") = py::none(), py::arg("attention") = "exact")
      .def("encode_full", encode_impl, py::arg("tokens"), py::arg("precision") = "fp32", py::arg("threads") = 0,
           py::arg("positions") = py::none(), py::arg("image_size") = py::none(), py::arg("attention") = "exact")
      .def("encode_many", &encode_many_py, py::arg("tokens"), py::arg("precision") = "fp32", py::arg("threads") = 0,
           "Several Tokens in one encoder call (the weights read once for all of them); a list of Encoding, each "
           "equal to encode_full of its Tokens up to rounding")
      .def("__repr__", [](const VitModel& v) { return "<fovea.Model " + v.describe() + ">"; });

}

// ---- content cache ---------------------------------------------------------------------------
void bind_cache(py::module_& m) {
  py::class_<TokenCache>(m, "TokenCache",
                         "fovea::TokenCache over bytes: keyed BLAKE2b-256 content keys, an LRU byte budget (see "
                         "fovea.TokenCache)")
      .def(py::init([](int64_t budget_bytes, const py::object& secret) {
             if (secret.is_none()) return std::make_unique<TokenCache>(budget_bytes);
             const std::string s = secret.cast<py::bytes>();
             if (s.size() != 32) throw fovea::invalid_argument("secret must be 32 bytes");
             CacheSecret cs;
             std::memcpy(cs.bytes.data(), s.data(), 32);
             return std::make_unique<TokenCache>(budget_bytes, cs);
           }),
           py::arg("budget_bytes"), py::arg("secret") = py::none())
      .def(
          "key",
          [](const TokenCache& c, const std::vector<py::bytes>& parts) {
            std::vector<std::string_view> views(parts.begin(), parts.end());
            std::vector<std::span<const uint8_t>> spans;
            for (std::string_view v : views) spans.emplace_back(reinterpret_cast<const uint8_t*>(v.data()), v.size());
            const CacheKey k = c.content_key(spans);
            return py::bytes(reinterpret_cast<const char*>(k.digest.data()), k.digest.size());
          },
          py::arg("parts"), "The 32-byte content key of `parts` (a list of bytes), keyed with this cache's secret")
      .def(
          "get",
          [](TokenCache& c, const py::bytes& key) -> py::object {
            const CacheKey k = cache_key_of(key);
            const Tensor* t = c.acquire(k);
            if (!t) return py::none();
            py::bytes out(reinterpret_cast<const char*>(t->bytes()), t->size_bytes());
            c.release(k);
            return out;
          },
          py::arg("key"), "The bytes cached under `key` (a hit counts as a use), or None")
      .def(
          "put",
          [](TokenCache& c, const py::bytes& key, const py::bytes& data) {
            const CacheKey k = cache_key_of(key);
            const std::string_view d = data;
            if (c.contains(k)) return false;
            Tensor t(DType::u8, {int64_t(d.size())});
            if (!d.empty()) std::memcpy(t.bytes(), d.data(), d.size());
            try {
              c.insert(k, std::move(t));
            } catch (const Error&) {
              return false;  // another thread cached it first
            }
            c.release(k);  // unreferenced: evicted least recently used first past the budget
            return true;
          },
          py::arg("key"), py::arg("data"), "Cache `data` under `key` unless it is there; True when added")
      .def("__contains__", [](const TokenCache& c, const py::bytes& key) { return c.contains(cache_key_of(key)); })
      .def("__len__", [](const TokenCache& c) { return c.stats().entries; })
      .def(
          "stats",
          [](const TokenCache& c) {
            const CacheStats s = c.stats();
            py::dict d;
            d["entries"] = s.entries;
            d["bytes"] = s.bytes;
            d["budget_bytes"] = s.budget_bytes;
            d["hits"] = s.hits;
            d["misses"] = s.misses;
            d["inserts"] = s.inserts;
            d["evictions"] = s.evictions;
            return d;
          },
          "entries, bytes, budget_bytes, hits, misses, inserts, evictions");

}

// ---- video ---------------------------------------------------------------------------------
// fovea.VideoReader: a video's decoded frames, iterated as (RGB array, pts, index).
void bind_video_reader(py::module_& m) {
  py::class_<PyVideoReader>(m, "VideoReader", "Decoded video frames (see fovea.VideoReader).")
      .def(py::init([](const py::object& path_obj, int every, std::optional<double> fps, std::optional<int64_t> max_frames,
                       int threads, uint64_t max_pixels, bool quiet, bool autorotate) {
             const std::string path = fs_path(path_obj);
             if (every < 1) throw fovea::invalid_argument("every must be >= 1");
             if (fps && !(*fps > 0 && std::isfinite(*fps))) throw fovea::invalid_argument("fps must be > 0");
             if (fps && every != 1) throw fovea::invalid_argument("every and fps are exclusive");
             if (max_frames && *max_frames < 1) throw fovea::invalid_argument("max_frames must be >= 1");
             if (threads < 0) throw fovea::invalid_argument("threads must be >= 0");
             auto r = std::make_unique<PyVideoReader>();
             r->keep = frame_sampler(every > 1 ? every : 0, fps ? *fps : 0.0);
             r->max_frames = max_frames ? *max_frames : 0;
             if (quiet) quiet_ffmpeg_log();
             VideoReaderOptions ro;
             ro.threads = threads;
             ro.max_pixels = max_pixels;
             ro.autorotate = autorotate;
             py::gil_scoped_release nogil;
             r->reader = ReaderPtr(new VideoReader(VideoReader::open(path, ro)));
             return r;
           }),
           py::arg("path"), py::arg("every") = 1, py::arg("fps") = py::none(), py::arg("max_frames") = py::none(),
           py::arg("threads") = 0, py::arg("max_pixels") = VideoReaderOptions{}.max_pixels, py::arg("quiet") = true,
           py::arg("autorotate") = true)
      .def_property_readonly("info", [](const PyVideoReader& r) { return info_dict(r.reader->info()); })
      .def_property_readonly("frames_decoded", [](const PyVideoReader& r) { return r.reader->frames_decoded(); })
      .def_property_readonly("corrupt_packets", [](const PyVideoReader& r) { return r.reader->corrupt_packets(); })
      .def_property_readonly("corrupt_frames", [](const PyVideoReader& r) { return r.reader->corrupt_frames(); })
      .def_property_readonly("timestamps_repaired",
                             [](const PyVideoReader& r) { return r.reader->timestamps_repaired(); })
      .def_property_readonly("warnings", [](const PyVideoReader& r) { return r.warnings; })
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", [](PyVideoReader& self) {
        VideoFrame f;
        bool got = false;
        {
          py::gil_scoped_release nogil;
          std::lock_guard lock(self.mu);
          if (self.max_frames == 0 || self.returned < self.max_frames) {
            f.image = self.pool->take();  // a buffer an earlier frame's array gave back, if any
            got = self.reader->read(f, self.keep);
            if (got) ++self.returned;
          }
          for (std::string& w : self.reader->take_warnings()) self.warnings.push_back(std::move(w));
        }
        if (!got) throw py::stop_iteration();
        return py::make_tuple(frame_array(std::move(f.image), self.pool), f.pts_s, f.index);
      });
}

// fovea.VideoFrameResult: one processed frame's tokens, embeddings and what was reused.
void bind_video_frame_result(py::module_& m) {
  py::class_<PyFrameResult>(m, "VideoFrameResult", "One processed frame of fovea.video.")
      .def_property_readonly("index", [](const PyFrameResult& f) { return f.r.index; })
      .def_property_readonly("pts", [](const PyFrameResult& f) { return f.r.pts_s; })
      .def_property_readonly("embeddings",
                             [](py::object self) -> py::object {
                               const Tensor& t = self.cast<PyFrameResult&>().r.embeddings;
                               return t.rank() ? py::object(tensor_view(t, self)) : py::none();
                             },
                             "[N, D] float32, or None without a model")
      .def_property_readonly("projected",
                             [](py::object self) -> py::object {
                               const Tensor& t = self.cast<PyFrameResult&>().r.projected;
                               return t.rank() ? py::object(tensor_view(t, self)) : py::none();
                             },
                             "[N, E] float32: the projector's output (LLaVA / mmproj), or None")
      .def_property_readonly("patches", [](py::object self) { return tensor_view(self.cast<PyFrameResult&>().r.batch.patches, self); },
                             "[N, 3, P, P]")
      .def_property_readonly("positions", [](py::object self) { return tensor_view(self.cast<PyFrameResult&>().r.batch.positions, self); },
                             "[N, 4] float32: centre x, centre y, side, level")
      .def_property_readonly("levels", [](py::object self) { return tensor_view(self.cast<PyFrameResult&>().r.batch.levels, self); },
                             "[N] int32")
      .def_property_readonly("recomputed",
                             [](py::object self) {
                               const auto& v = self.cast<PyFrameResult&>().r.recomputed;
                               return vector_view(v, {py::ssize_t(v.size())}, self);
                             },
                             "[N] uint8: 1 where the token's patch embedding or ViT state was recomputed")
      .def_property_readonly("previous_row",
                             [](py::object self) {
                               const auto& v = self.cast<PyFrameResult&>().r.previous_row;
                               return vector_view(v, {py::ssize_t(v.size())}, self);
                             },
                             "[N] int64: the token's row in the previous frame, -1 if new")
      .def_property_readonly("rows",
                             [](py::object self) -> py::object {
                               const auto& v = self.cast<PyFrameResult&>().r.rows;
                               if (!self.cast<PyFrameResult&>().r.batch.windowed()) return py::none();
                               return vector_view(v, {py::ssize_t(v.size())}, self);
                             },
                             "foveation='windows': [K] int64, the token rows the embeddings are (no finer window "
                             "covers them); None otherwise")
      .def_property_readonly("window",
                             [](py::object self) -> py::object {
                               const Tensor& t = self.cast<PyFrameResult&>().r.batch.window;
                               return t.rank() ? py::object(tensor_view(t, self)) : py::none();
                             },
                             "foveation='windows': [N] int32, the window of every token; None otherwise")
      .def_property_readonly("covered",
                             [](py::object self) -> py::object {
                               const Tensor& t = self.cast<PyFrameResult&>().r.batch.covered;
                               return t.rank() ? py::object(tensor_view(t, self)) : py::none();
                             },
                             "foveation='windows': [N] uint8, 1 for a token a finer window covers; None otherwise")
      .def_property_readonly("window_boxes",
                             [](const PyFrameResult& f) -> py::object {
                               if (!f.r.batch.windowed()) return py::none();
                               py::list out;
                               for (const TokenWindow& w : f.r.batch.windows)
                                 out.append(py::make_tuple(w.box[0], w.box[1], w.box[2], w.box[3]));
                               return out;
                             },
                             "foveation='windows': every window's (x0, y0, x1, y1) in frame pixels, the base view first")
      .def_property_readonly("window_reused",
                             [](py::object self) -> py::object {
                               const auto& v = self.cast<PyFrameResult&>().r.window_reused;
                               if (!self.cast<PyFrameResult&>().r.batch.windowed()) return py::none();
                               return vector_view(v, {py::ssize_t(v.size())}, self);
                             },
                             "foveation='windows': [W] uint8, 1 where the window's pixels did not change and its "
                             "outputs are the previous frame's, bit for bit")
      .def_property_readonly("window_class_tokens",
                             [](py::object self) -> py::object {
                               const Tensor& t = self.cast<PyFrameResult&>().r.window_class_tokens;
                               return t.rank() ? py::object(tensor_view(t, self)) : py::none();
                             },
                             "foveation='windows': [W, D] float32, every window's class token (row 0 the base "
                             "view's); None otherwise, and with reuse='incremental'")
      .def_property_readonly("dirty_tiles", [](const PyFrameResult& f) { return f.r.dirty_tiles; })
      .def_property_readonly("tiles", [](const PyFrameResult& f) { return f.r.tiles; })
      .def_property_readonly("resampled_tokens", [](const PyFrameResult& f) { return f.r.resampled_tokens; })
      .def_property_readonly("recomputed_tokens", [](const PyFrameResult& f) { return f.r.recomputed_tokens; })
      .def_property_readonly("refresh", [](const PyFrameResult& f) { return f.r.refresh; })
      .def_property_readonly("refresh_reason", [](const PyFrameResult& f) { return f.r.refresh_reason; })
      .def_property_readonly("layout_changed", [](const PyFrameResult& f) { return f.r.layout_changed; })
      .def_property_readonly("approximate", [](const PyFrameResult& f) { return f.r.approximate; })
      .def_property_readonly("drift_estimate", [](const PyFrameResult& f) { return f.r.drift_estimate; },
                             "the incremental encoder's estimate of the error reuse left: per token, the relative "
                             "changes left unapplied summed over layers, the mean (0 on a full encode)")
      .def_property_readonly("drift_estimate_max", [](const PyFrameResult& f) { return f.r.drift_estimate_max; })
      .def_property_readonly("timings",
                             [](const PyFrameResult& f) {
                               const FrameTimings& t = f.r.timings;
                               py::dict d;
                               d["change_ms"] = t.change_ms;
                               d["pyramid_ms"] = t.pyramid_ms;
                               d["relevance_ms"] = t.relevance_ms;
                               d["allocate_ms"] = t.allocate_ms;
                               d["extract_ms"] = t.extract_ms;
                               d["encode_ms"] = t.encode_ms;
                               d["total_ms"] = t.total_ms();
                               return d;
                             })
      .def("__len__", [](const PyFrameResult& f) { return f.r.batch.size(); })
      .def("__repr__", [](const PyFrameResult& f) {
        return "<fovea.VideoFrameResult frame " + std::to_string(f.r.index) + ", " + std::to_string(f.r.batch.size()) +
               " tokens, " + std::to_string(f.r.recomputed_tokens) + " recomputed" + (f.r.refresh ? ", refresh>" : ">");
      });
}

void bind_video(py::module_& m) {
  bind_video_reader(m);
  bind_video_frame_result(m);

  py::class_<PyVideoSession>(m, "VideoSession", "Frames handed in one at a time (see fovea.VideoSession).")
      .def(py::init(&video_session_py), py::arg("model"), py::arg("budget"), py::arg("patch"), py::arg("reuse"),
           py::arg("keyframe"), py::arg("threshold"), py::arg("token_threshold"), py::arg("hysteresis"),
           py::arg("refresh_fraction"), py::arg("precision"), py::arg("threads"), py::arg("dtype"),
           py::arg("exact_above_work") = VideoParams{}.exact_above_work, py::arg("foveation") = "mixed",
           py::arg("window_grid") = py::none(), py::arg("keep_covered") = false)
      .def("process", &video_session_process, py::arg("image"), py::arg("fixations"), py::arg("regions"),
           py::arg("index") = py::none(), py::arg("pts") = 0.0)
      .def_property_readonly("frames", [](const PyVideoSession& s) { return s.frames; })
      .def_property_readonly("reuse", [](const PyVideoSession& s) { return std::string(to_string(s.session->params().reuse)); })
      .def_property_readonly("budget", [](const PyVideoSession& s) { return s.session->params().tokenize.alloc.budget_tokens; });

  m.def("video", &video_py, py::arg("path"), py::arg("model"), py::arg("budget"), py::arg("fixations"), py::arg("regions"),
        py::arg("every"), py::arg("fps"), py::arg("max_frames"), py::arg("reuse"), py::arg("keyframe"), py::arg("group"), py::arg("threshold"),
        py::arg("token_threshold"), py::arg("hysteresis"), py::arg("refresh_fraction"), py::arg("precision"),
        py::arg("threads"), py::arg("output"), py::arg("patch"), py::arg("dtype"), py::arg("max_level"), py::arg("weights"),
        py::arg("e0"), py::arg("sharpness"), py::arg("mean"), py::arg("std"), py::arg("normalize"), py::arg("fine_bias"),
        py::arg("detail_focus"), py::arg("fixation_spread"), py::arg("lookahead"), py::arg("max_pixels"), py::arg("quiet"),
        py::arg("autorotate"), py::arg("overlay"), py::arg("exact_above_work") = VideoParams{}.exact_above_work,
        py::arg("foveation") = "mixed", py::arg("window_grid") = py::none(), py::arg("keep_covered") = false);

}

// ---- files ---------------------------------------------------------------------------------
void bind_files(py::module_& m) {
  py::class_<PyTensorFile>(m, "TensorFile", "A safetensors file, mapped (see fovea.load).")
      .def("__getitem__", &file_tensor)
      .def("__contains__", [](const PyTensorFile& f, const std::string& k) { return f.file->find(k) != nullptr; })
      .def("__len__", [](const PyTensorFile& f) { return f.file->entries().size(); })
      .def("keys",
           [](const PyTensorFile& f) {
             std::vector<std::string> k;
             for (const auto& e : f.file->entries()) k.push_back(e.name);
             return k;
           })
      .def("__iter__",
           [](const PyTensorFile& f) {
             py::list k;
             for (const auto& e : f.file->entries()) k.append(e.name);
             return py::iter(k);
           })
      .def_property_readonly("metadata", [](const PyTensorFile& f) { return to_dict(f.file->metadata()); })
      .def_property_readonly("path", [](const PyTensorFile& f) { return f.file->path(); })
      .def("__repr__", [](const PyTensorFile& f) {
        return "<fovea.TensorFile " + f.file->path() + ", " + std::to_string(f.file->entries().size()) + " tensors>";
      });

  m.def(
      "load",
      [](const py::object& path) {
        const std::string p = fs_path(path);
        PyTensorFile f;
        py::gil_scoped_release nogil;
        f.file = std::make_shared<SafetensorsFile>(SafetensorsFile::open(p));
        return f;
      },
      py::arg("path"));

  m.def(
      "save",
      [](const py::object& path, const py::dict& tensors, const std::map<std::string, std::string>& metadata) {
        const std::string p = fs_path(path);
        std::vector<Tensor> owned;  // only for arrays that are not C-contiguous
        std::vector<TensorView> views;
        std::vector<std::string> names;
        std::vector<py::array> keep;
        for (const auto& [k, v] : tensors) {
          const std::string name = py::str(k);
          if (name == "__metadata__") throw fovea::invalid_argument("'__metadata__' is reserved; pass metadata=");
          py::array a = py::array::ensure(v);
          if (!a) throw py::type_error("tensor '" + name + "' is not an array");
          const auto dt = fovea_dtype(a.dtype());
          if (!dt) throw py::type_error("tensor '" + name + "' has dtype " + std::string(py::str(a.dtype())) +
                                        ", which safetensors (as fovea writes it) does not hold");
          if (!(a.flags() & py::array::c_style)) a = py::array::ensure(a, py::array::c_style);
          keep.push_back(a);
          names.push_back(name);
          views.emplace_back(*dt, std::vector<int64_t>(a.shape(), a.shape() + a.ndim()), a.data());
        }
        // save_safetensors takes Tensors: copy each into one (serialising copies anyway).
        owned.reserve(views.size());
        for (const TensorView& v : views) {
          Tensor t(v.dtype(), v.shape());
          if (t.size_bytes()) std::memcpy(t.bytes(), v.bytes(), t.size_bytes());
          owned.push_back(std::move(t));
        }
        std::vector<NamedTensor> named;
        for (size_t i = 0; i < owned.size(); ++i) named.push_back({names[i], &owned[i]});
        py::gil_scoped_release nogil;
        save_safetensors(p, named, metadata);
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = std::map<std::string, std::string>{});

  py::class_<PyTarReader>(m, "TarReader",
                          "A WebDataset .tar shard: iterates (name, bytes) of its regular members whose names end "
                          "with one of `suffixes` (any case; all when empty), in archive order. OSError when it "
                          "cannot be opened, RuntimeError for a damaged archive.")
      .def(py::init([](const py::object& path, std::vector<std::string> suffixes) {
             for (std::string& s : suffixes)
               for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
             const std::string p = fs_path(path);
             py::gil_scoped_release nogil;
             return PyTarReader{std::make_unique<TarReader>(p), std::move(suffixes)};
           }),
           py::arg("path"), py::arg("suffixes") = std::vector<std::string>{})
      .def("__iter__", [](PyTarReader& r) -> PyTarReader& { return r; })
      .def("__next__", [](PyTarReader& r) {
        TarMember member;
        bool more = false;
        {
          py::gil_scoped_release nogil;
          more = r.reader->next(member, [&](const std::string& name) { return r.wanted(name); });
        }
        if (!more) throw py::stop_iteration();
        return py::make_tuple(member.name, py::bytes(reinterpret_cast<const char*>(member.bytes.data()), member.bytes.size()));
      });
  m.def("webdataset_key", &webdataset_key, py::arg("member"),
        "WebDataset's key of a member name: up to the first '.' of its file name.");
  m.def("tar_name_escapes", &tar_name_escapes, py::arg("member"),
        "True for a member name that would leave the folder it is extracted into (absolute, or a '..' part).");
}

}  // namespace

void bind_native(py::module_& m);  // native.cpp: Qwen2-VL / Qwen2.5-VL towers

PYBIND11_MODULE(_fovea, m) {
  m.doc() = "fovea's C++ library (see the `fovea` package for the documented API)";
  m.attr("__version__") = FOVEA_VERSION_STRING;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      switch (e.code()) {
        case Errc::invalid_argument: PyErr_SetString(PyExc_ValueError, e.what()); return;
        case Errc::io: PyErr_SetString(PyExc_OSError, e.what()); return;
        case Errc::out_of_memory: PyErr_SetString(PyExc_MemoryError, e.what()); return;
        default: PyErr_SetString(PyExc_RuntimeError, e.what()); return;
      }
    }
  });

  bind_tokens(m);
  bind_functions(m);
  bind_encoding(m);
  bind_model(m);
  bind_cache(m);
  bind_video(m);
  bind_files(m);
  bind_native(m);
}
