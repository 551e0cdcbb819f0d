// The query-embedding hook (per-tile patch-embedding features) and query-vector files.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "encoder/encoder_internal.hpp"
#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"

namespace fovea {

using namespace encoder_detail;

namespace {

// The features of tile_feature_fn's hook, on context ctx.
Tensor tile_features(EncoderContext::Impl& ctx, const VitModel::Impl& m, const Normalization& norm, int query_dim,
                     int threads, bool reference, const PyramidU8& pyr, const TileGrid& g) {
  const VitConfig& c = m.config;
  const int64_t D = c.hidden;
  const bool project = query_dim != D && query_dim == c.projection_dim && present(m.proj_w);
  if (query_dim != D && !project)
    throw Error(Errc::invalid_argument,
                "the query embedding has " + std::to_string(query_dim) + " values but the model's features have " +
                    std::to_string(D) +
                    (c.projection_dim ? " (or " + std::to_string(c.projection_dim) + " projected)" : std::string()));
  if (g.patch_px != c.patch_px)
    throw Error(Errc::invalid_argument, "the query-embedding features need --patch " + std::to_string(c.patch_px) +
                                            " (the model's patch size)");
  const ImageViewU8 img = pyr.view(0);  // the caller's pixels when tokenize was given a view
  const int P = g.patch_px, C = c.channels;
  const int64_t tiles = g.tiles(), K = int64_t(C) * P * P;
  Tensor patches(DType::f32, {tiles, K});
  float* pp = patches.data<float>();
  const int w = img.width(), h = img.height(), ch = img.channels();
  for (int64_t t = 0; t < tiles; ++t) {
    const int tx = int(t % g.tiles_x), ty = int(t / g.tiles_x);
    for (int cc = 0; cc < C; ++cc) {
      const int src_c = std::min(cc, ch - 1);
      const float mean = norm.enabled ? norm.mean[cc % 3] : 0.0f, inv = norm.enabled ? 1.0f / norm.std[cc % 3] : 1.0f;
      for (int y = 0; y < P; ++y) {
        const uint8_t* row = img.row(src_c, std::min(ty * P + y, h - 1));
        const ptrdiff_t ps = img.pixel_stride();
        for (int x = 0; x < P; ++x)
          pp[t * K + (int64_t(cc) * P + y) * P + x] = (row[std::min(tx * P + x, w - 1) * ps] / 255.0f - mean) * inv;
      }
    }
  }
  Tensor feats(DType::f32, {tiles, D});
  GemmArgs a{};
  a.a = pp, a.lda = K, a.a_dt = DType::f32;
  a.w = m.patch_w.data<float>(), a.ldw = K, a.w_dt = DType::f32;
  a.bias = !present(m.patch_b) ? nullptr : m.patch_b.data<float>();
  a.c = feats.data<float>(), a.ldc = D, a.c_dt = DType::f32;
  a.m = tiles, a.n = D, a.k = K;
  if (reference) {
    gemm_reference(a);
  } else {
    const ContextUse in_use(ctx);
    const OmpThreadsScope team(threads);  // restored on return
    bind_gemm(ctx, m, threads).run(a);
  }
  if (!project) return feats;
  const int64_t E = c.projection_dim;
  Tensor out(DType::f32, {tiles, E});
  std::vector<float> n(D);
  const float* pw = m.proj_w.data<float>();
  for (int64_t t = 0; t < tiles; ++t) {
    layer_norm_row_ref(feats.data<float>() + t * D, m.post_w.data<float>(), m.post_b.data<float>(), c.ln_eps, D,
                       n.data(), DType::f32);
    for (int64_t e = 0; e < E; ++e) {
      double acc = 0;
      for (int64_t d = 0; d < D; ++d) acc += double(pw[e * D + d]) * n[d];
      out.data<float>()[t * E + e] = float(acc);
    }
  }
  return out;
}

}  // namespace

TileFeatureFn tile_feature_fn(EncoderContext& ctx, const VitModel& model, const Normalization& norm, int query_dim,
                              Executor& exec) {
  if (model.config().native.enabled())
    throw invalid_argument("query embeddings: '" + model.source() + "' is a native-resolution tower; its patch embedding does not give tile features");
  // The hook keeps the Executor's settings, not the Executor: it may outlive it.
  const int threads = std::max(1, exec.threads());
  const bool reference = exec.reference();
  EncoderContext::Impl* cx = &ctx.impl();
  return [cx, model, norm, query_dim, threads, reference](const PyramidU8& pyr, const TileGrid& g) {
    return tile_features(*cx, model.impl(), norm, query_dim, threads, reference, pyr, g);
  };
}

TileFeatureFn tile_feature_fn(const VitModel& model, const Normalization& norm, int query_dim, Executor& exec) {
  if (model.config().native.enabled())
    throw invalid_argument("query embeddings: '" + model.source() + "' is a native-resolution tower; its patch embedding does not give tile features");
  const int threads = std::max(1, exec.threads());
  const bool reference = exec.reference();
  return [model, norm, query_dim, threads, reference](const PyramidU8& pyr, const TileGrid& g) {
    ContextPool::Lease lease = model.impl().contexts.take();
    return tile_features(lease.context().impl(), model.impl(), norm, query_dim, threads, reference, pyr, g);
  };
}

namespace {

std::vector<float> check_vector(std::vector<float> v, const std::string& path) {
  if (v.empty()) throw Error(Errc::invalid_argument, "'" + path + "': the query embedding is empty");
  for (float x : v)
    if (!std::isfinite(x)) throw Error(Errc::invalid_argument, "'" + path + "': the query embedding has non-finite values");
  return v;
}

std::vector<float> load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Errc::io, "cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string b = ss.str();
  auto fail = [&](const std::string& why) { return Error(Errc::corrupt_data, "'" + path + "' is not a usable .npy file: " + why); };
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) throw fail("bad magic");
  const int major = uint8_t(b[6]);
  size_t hlen = 0, hstart = 0;
  if (major == 1) {
    hlen = uint8_t(b[8]) | (size_t(uint8_t(b[9])) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) throw fail("truncated header");
    hlen = uint8_t(b[8]) | (size_t(uint8_t(b[9])) << 8) | (size_t(uint8_t(b[10])) << 16) | (size_t(uint8_t(b[11])) << 24);
    hstart = 12;
  } else {
    throw fail("unknown version");
  }
  if (hstart + hlen > b.size()) throw fail("truncated header");
  const std::string h = b.substr(hstart, hlen);
  auto field = [&](const std::string& key) -> std::string {
    const size_t k = h.find("'" + key + "'");
    if (k == std::string::npos) throw fail("header has no '" + key + "'");
    const size_t colon = h.find(':', k);
    if (colon == std::string::npos) throw fail("malformed header");
    return h.substr(colon + 1);
  };
  std::string descr = field("descr");
  const size_t q0 = descr.find('\''), q1 = descr.find('\'', q0 + 1);
  if (q0 == std::string::npos || q1 == std::string::npos) throw fail("malformed descr");
  descr = descr.substr(q0 + 1, q1 - q0 - 1);
  if (field("fortran_order").find("True") < field("fortran_order").find(',')) throw fail("Fortran order is not supported");
  std::string shape = field("shape");
  shape = shape.substr(shape.find('(') + 1, shape.find(')') - shape.find('(') - 1);
  std::vector<int64_t> dims;
  std::stringstream sh(shape);
  for (std::string item; std::getline(sh, item, ',');) {
    item.erase(std::remove_if(item.begin(), item.end(), ::isspace), item.end());
    if (item.empty()) continue;
    if (item.size() > 12 || !std::all_of(item.begin(), item.end(), ::isdigit)) throw fail("bad shape");
    dims.push_back(std::stoll(item));
  }
  if (!(dims.size() == 1 || (dims.size() == 2 && dims[0] == 1)))
    throw Error(Errc::invalid_argument, "'" + path + "': the query embedding must have shape [D] or [1, D]");
  const int64_t n = dims.back();
  size_t es = 0;
  if (descr == "<f4" || descr == "f4") es = 4;
  else if (descr == "<f8" || descr == "f8") es = 8;
  else if (descr == "<f2" || descr == "f2") es = 2;
  else throw fail("dtype '" + descr + "' (float16/32/64 little-endian expected)");
  const size_t data = hstart + hlen;
  if (b.size() - data != size_t(n) * es) throw fail("data size does not match the shape");
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const char* p = b.data() + data + i * es;
    if (es == 4) std::memcpy(&v[i], p, 4);
    else if (es == 8) {
      double d;
      std::memcpy(&d, p, 8);
      v[i] = float(d);
    } else {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v[i] = f16_to_f32(x);
    }
  }
  return v;
}

}  // namespace

std::vector<float> load_query_embedding(const std::string& path) {
  if (path.size() >= 4 && path.ends_with(".npy")) return check_vector(load_npy(path), path);
  SafetensorsFile f = SafetensorsFile::open(path);
  const SafetensorsFile::Entry* e = f.find("query");
  if (!e) e = f.find("embedding");
  if (!e && f.entries().size() == 1) e = &f.entries()[0];
  if (!e)
    throw Error(Errc::invalid_argument, "'" + path + "': no tensor named 'query' or 'embedding' (and not exactly one tensor)");
  if (!(e->shape.size() == 1 || (e->shape.size() == 2 && e->shape[0] == 1)))
    throw Error(Errc::invalid_argument, "'" + path + "': the query embedding must have shape [D] or [1, D]");
  if (e->dtype_name != "F32" && e->dtype_name != "F16" && e->dtype_name != "BF16")
    throw Error(Errc::invalid_argument, "'" + path + "': the query embedding must be F32, F16 or BF16");
  Tensor t = f.load_f32(*e);
  return check_vector(std::vector<float>(t.data<float>(), t.data<float>() + t.numel()), path);
}

}  // namespace fovea
