// VideoTokenWriter: a safetensors file written as a stream (see fovea/video.hpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/video.hpp"

namespace fovea {

namespace {

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const void* data, size_t n, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(Errc::io, "cannot write '" + what + "': " + errno_text());
    p += w;
    n -= size_t(w);
  }
}

// A file in `path`'s folder named path + suffix + a random number, created exclusively.
int create_beside(const std::string& path, const std::string& suffix, std::string* name) {
  std::random_device rd;
  for (int attempt = 0; attempt < 16; ++attempt) {
    *name = path + suffix + std::to_string(rd() % 1000000);
    const int fd = ::open(name->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST) break;
  }
  throw Error(Errc::io, "cannot write '" + path + "': " + errno_text());
}

}  // namespace

// One per-token tensor streamed through an unlinked spill file.
struct RowStream {
  std::string name;
  DType dtype;
  std::vector<int64_t> row_shape;
  size_t row_bytes = 0;
  int spill = -1;
  RowStream(const std::string& path, std::string n, DType dt, std::vector<int64_t> shape)
      : name(std::move(n)), dtype(dt), row_shape(std::move(shape)) {
    row_bytes = dtype_size(dtype);
    for (int64_t d : row_shape) row_bytes *= size_t(d);
    // Unnamed (O_TMPFILE), or named and unlinked at once: gone with the descriptor, whatever
    // happens to the process.
    const size_t slash = path.find_last_of('/');
    const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    spill = ::open(folder.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (spill < 0) {
      std::string file;
      spill = create_beside(path, ".spill-", &file);
      ::unlink(file.c_str());
    }
  }
  RowStream(const RowStream&) = delete;
  RowStream& operator=(const RowStream&) = delete;
  ~RowStream() {
    if (spill >= 0) ::close(spill);
  }
};

struct VideoTokenWriter::Impl {
  std::string path;
  std::vector<std::unique_ptr<RowStream>> streams;  // [0]: the rows given to the constructor
  std::vector<int64_t> offsets{0};
  std::vector<double> pts;
  std::vector<float> positions;
  std::vector<int32_t> levels;
  std::vector<uint8_t> recomputed;
  // add_frame_windows: per frame, its first window; the windows' tensors, frame after frame.
  std::vector<int64_t> window_offsets{0};
  std::vector<float> window_boxes, window_levels, window_class_tokens;
  std::vector<int32_t> window_grids;
  int64_t class_dim = -1;  // -1: no frame yet; 0: some frame had none
};

VideoTokenWriter::VideoTokenWriter(const std::string& path, const std::string& rows_name, DType dtype,
                                   std::vector<int64_t> row_shape)
    : impl_(std::make_unique<Impl>()) {
  if (path.empty()) throw Error(Errc::invalid_argument, "output path is empty");
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))  // else found only at the final rename
    throw Error(Errc::io, "cannot write '" + path + "': it is a directory");
  Impl& m = *impl_;
  m.path = path;
  m.streams.push_back(std::make_unique<RowStream>(path, rows_name, dtype, std::move(row_shape)));
}

void VideoTokenWriter::add_rows_tensor(const std::string& name, DType dtype, std::vector<int64_t> row_shape) {
  Impl& m = *impl_;
  if (!m.pts.empty()) throw Error(Errc::invalid_argument, "VideoTokenWriter: add_rows_tensor after the first frame");
  for (const auto& st : m.streams)
    if (st->name == name) throw Error(Errc::invalid_argument, "VideoTokenWriter: tensor '" + name + "' added twice");
  m.streams.push_back(std::make_unique<RowStream>(m.path, name, dtype, std::move(row_shape)));
}

VideoTokenWriter::~VideoTokenWriter() = default;
int64_t VideoTokenWriter::frames() const { return int64_t(impl_->pts.size()); }
int64_t VideoTokenWriter::tokens() const { return impl_->offsets.back(); }

void VideoTokenWriter::add_frame(const Tensor& rows, const Tensor& positions, const Tensor& levels,
                                 const std::vector<uint8_t>& recomputed, double pts_s,
                                 const std::vector<const Tensor*>& extra) {
  Impl& m = *impl_;
  const int64_t n = rows.rank() > 0 ? rows.dim(0) : 0;
  auto matches = [n](const RowStream& st, const Tensor* t) {
    return t && t->dtype() == st.dtype && size_t(t->size_bytes()) == size_t(n) * st.row_bytes;
  };
  bool ok = matches(*m.streams[0], &rows) && extra.size() + 1 == m.streams.size() && positions.dtype() == DType::f32 &&
            positions.numel() == 4 * n && levels.dtype() == DType::i32 && levels.numel() == n &&
            int64_t(recomputed.size()) == n;
  for (size_t i = 0; ok && i < extra.size(); ++i) ok = matches(*m.streams[i + 1], extra[i]);
  if (!ok) throw Error(Errc::invalid_argument, "VideoTokenWriter: the frame's tensors do not match");
  write_all(m.streams[0]->spill, rows.bytes(), rows.size_bytes(), m.path);
  for (size_t i = 0; i < extra.size(); ++i) write_all(m.streams[i + 1]->spill, extra[i]->bytes(), extra[i]->size_bytes(), m.path);
  m.offsets.push_back(m.offsets.back() + n);
  m.pts.push_back(pts_s);
  m.positions.insert(m.positions.end(), positions.data<float>(), positions.data<float>() + 4 * n);
  m.levels.insert(m.levels.end(), levels.data<int32_t>(), levels.data<int32_t>() + n);
  m.recomputed.insert(m.recomputed.end(), recomputed.begin(), recomputed.end());
}

void VideoTokenWriter::add_frame_windows(const std::vector<TokenWindow>& windows, const Tensor& class_tokens) {
  Impl& m = *impl_;
  if (m.pts.empty() || m.window_offsets.size() != m.pts.size())
    throw Error(Errc::invalid_argument, "VideoTokenWriter: add_frame_windows once per frame, after its add_frame");
  const int64_t n = int64_t(windows.size());
  const bool classes = class_tokens.rank() == 2 && class_tokens.dim(0) == n && class_tokens.dtype() == DType::f32;
  if (class_tokens.rank() > 0 && !classes)
    throw Error(Errc::invalid_argument, "VideoTokenWriter: the class tokens must be [W, D] f32, one per window");
  for (auto& [name, t] : window_tensors_of(windows)) {
    std::vector<float>* f = name == "window_boxes" ? &m.window_boxes : name == "window_levels" ? &m.window_levels : nullptr;
    if (f) f->insert(f->end(), t.data<float>(), t.data<float>() + t.numel());
    else m.window_grids.insert(m.window_grids.end(), t.data<int32_t>(), t.data<int32_t>() + t.numel());
  }
  m.window_offsets.push_back(m.window_offsets.back() + n);
  const int64_t d = classes ? class_tokens.dim(1) : 0;
  if (m.class_dim < 0) m.class_dim = d;
  if (d != m.class_dim) m.class_dim = 0, m.window_class_tokens.clear();
  if (m.class_dim > 0)
    m.window_class_tokens.insert(m.window_class_tokens.end(), class_tokens.data<float>(),
                                 class_tokens.data<float>() + class_tokens.numel());
}

void VideoTokenWriter::finish(const std::map<std::string, std::string>& metadata) {
  Impl& m = *impl_;
  const int64_t F = int64_t(m.pts.size()), T = m.offsets.back();
  nlohmann::json header = nlohmann::json::object();
  uint64_t at = 0;
  auto entry = [&](const std::string& name, const char* dt, std::vector<int64_t> shape, uint64_t bytes) {
    header[name] = {{"dtype", dt}, {"shape", shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  };
  entry("frame_offsets", "I64", {F + 1}, uint64_t(F + 1) * 8);
  entry("pts", "F64", {F}, uint64_t(F) * 8);
  for (const auto& st : m.streams) {
    std::vector<int64_t> shape{T};
    shape.insert(shape.end(), st->row_shape.begin(), st->row_shape.end());
    entry(st->name, std::string(dtype_name(st->dtype)).c_str(), shape, uint64_t(T) * st->row_bytes);
  }
  entry("positions", "F32", {T, 4}, uint64_t(T) * 16);
  entry("levels", "I32", {T}, uint64_t(T) * 4);
  entry("recomputed", "U8", {T}, uint64_t(T));
  const bool windows = F > 0 && int64_t(m.window_offsets.size()) == F + 1;
  const int64_t NW = m.window_offsets.back();
  if (windows) {
    entry("window_offsets", "I64", {F + 1}, uint64_t(F + 1) * 8);
    entry("window_boxes", "F32", {NW, 4}, uint64_t(NW) * 16);
    entry("window_grids", "I32", {NW, 2}, uint64_t(NW) * 8);
    entry("window_levels", "F32", {NW}, uint64_t(NW) * 4);
    if (m.class_dim > 0) entry("window_class_tokens", "F32", {NW, m.class_dim}, uint64_t(NW * m.class_dim) * 4);
  }
  header["__metadata__"] = metadata;
  std::string h = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // non-UTF-8: U+FFFD
  while (h.size() % 8) h.push_back(' ');

  // Unnamed until complete (AtomicFile): a kill at any point leaves the old file or the new one.
  AtomicFile out(m.path);
  auto put = [&](const void* p, size_t n) { out.write({static_cast<const uint8_t*>(p), n}); };
  const uint64_t len = h.size();
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = uint8_t(len >> (8 * i));
  put(le, 8);
  put(h.data(), h.size());
  put(m.offsets.data(), m.offsets.size() * 8);
  put(m.pts.data(), m.pts.size() * 8);
  std::vector<uint8_t> buf(size_t(4) << 20);
  for (const auto& st : m.streams) {
    if (::lseek(st->spill, 0, SEEK_SET) != 0) throw Error(Errc::io, "cannot read back the spill file: " + errno_text());
    uint64_t left = uint64_t(T) * st->row_bytes;
    while (left > 0) {
      const ssize_t r = ::read(st->spill, buf.data(), std::min<uint64_t>(left, buf.size()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw Error(Errc::io, "cannot read back the spill file: " + errno_text());
      put(buf.data(), size_t(r));
      left -= uint64_t(r);
    }
  }
  put(m.positions.data(), m.positions.size() * 4);
  put(m.levels.data(), m.levels.size() * 4);
  put(m.recomputed.data(), m.recomputed.size());
  if (windows) {
    put(m.window_offsets.data(), m.window_offsets.size() * 8);
    put(m.window_boxes.data(), m.window_boxes.size() * 4);
    put(m.window_grids.data(), m.window_grids.size() * 4);
    put(m.window_levels.data(), m.window_levels.size() * 4);
    if (m.class_dim > 0) put(m.window_class_tokens.data(), m.window_class_tokens.size() * 4);
  }
  out.commit();
}

namespace {

std::string fmt3(const std::array<float, 3>& v) {
  std::ostringstream s;
  s.precision(8);
  s << v[0] << ',' << v[1] << ',' << v[2];
  return s.str();
}

}  // namespace

std::map<std::string, std::string> video_metadata(const VideoParams& params, const VideoRunSummary& run,
                                                  const VitModel* model, const std::string& model_name,
                                                  const std::string& preprocessing_source) {
  std::map<std::string, std::string> meta;
  meta["format"] = model ? "fovea.video.embeddings" : "fovea.video.tokens";
  meta["source"] = run.source;
  meta["frames"] = std::to_string(run.frames);
  meta["width"] = std::to_string(run.info.width);
  meta["height"] = std::to_string(run.info.height);
  meta["patch_size"] = std::to_string(params.tokenize.patch_px);
  meta["budget"] = std::to_string(params.tokenize.alloc.budget_tokens);
  meta["reuse"] = std::string(to_string(params.reuse));
  meta["change_threshold"] = std::to_string(params.change_threshold);
  meta["keyframe"] = std::to_string(params.keyframe_interval);
  meta["group_frames"] = std::to_string(params.group_frames);
  meta["foveation"] = std::string(to_string(params.tokenize.foveation));
  if (params.tokenize.foveation == Foveation::windows) {
    meta["window_grid"] = std::to_string(params.tokenize.windows.grid);
    meta["window_px"] = std::to_string(params.tokenize.windows.grid * params.tokenize.patch_px);
    meta["keep_covered"] = params.tokenize.windows.keep_covered ? "true" : "false";
  }
  meta["approximate"] = run.approximate ? "true" : "false";
  if (run.info.rotation_applied) meta["rotation"] = std::string(orientation_name(run.info.orientation));
  if (run.info.sar_num != run.info.sar_den)  // not resampled: the tokens are of the stored pixels
    meta["sample_aspect_ratio"] = std::to_string(run.info.sar_num) + ":" + std::to_string(run.info.sar_den);
  if (run.approximate)
    meta["approximation"] = std::string("incremental ViT (token gating") +
                            (params.encoder.bound_attention ? " with the attention bound" : ", attention bound off") +
                            ", token threshold " + std::to_string(params.encoder.token_threshold) +
                            "): reused layer states, not a full encode";
  const Normalization& n = params.tokenize.extract.norm;
  const bool normalised = params.tokenize.extract.dtype != DType::u8 && n.enabled;
  meta["norm_mean"] = normalised ? fmt3(n.mean) : "none";
  meta["norm_std"] = normalised ? fmt3(n.std) : "none";
  if (model) {
    meta["model"] = model_name;
    meta["model_description"] = model->describe();
    meta["embedding_output"] = embedding_output(model->config());
    meta["random_weights"] = model->is_random() ? "true" : "false";
    const Precision runs = runnable_precision(params.encoder.precision);  // what the encoder ran
    meta["precision"] = std::string(to_string(runs));
    if (runs != params.encoder.precision) meta["precision_requested"] = std::string(to_string(params.encoder.precision));
    meta["preprocessing_source"] = preprocessing_source;
  } else {
    meta["dtype"] = std::string(dtype_name(params.tokenize.extract.dtype));
  }
  return meta;
}

}  // namespace fovea
