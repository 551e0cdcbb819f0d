// fovea/embeddings.hpp — the embeddings file: what `fovea encode` writes and what the
// compression, video and Python front ends read. The library owns the format.
//
//   fovea::EmbeddingsFile f = fovea::load_embeddings("photo.emb.safetensors");
//   const fovea::Tensor& e = f.embeddings;                 // [N, D] float32, token order
//   const float* pos = f.positions.data<float>();          // [N, 4]: cx, cy, side, level
//   f.metadata["note"] = "re-saved";
//   fovea::save_embeddings("copy.safetensors", f);         // validated, atomic
//
// A safetensors file with __metadata__ "format" = "fovea.embeddings" and these tensors:
//   embeddings   [N, D] F32   the encoder's last hidden state, one row per token (required)
//   positions    [N, 4] F32   centre x, centre y, side (px, original image), level (required)
//   levels       [N]    I32   mip level of each token (required)
//   projected    [N, E] F32   what a language model consumes, when the model has a projector
//   class_token  [1, D] F32,  pooled [1, D] F32,  image_embeds [1, E] F32,  logits [1, K] F32
// Other tensors are kept in `extra` (read) and written after these (save).
// Thread safety: free functions over values; safe from any thread.
#pragma once
#include "fovea/export.hpp"

#include <map>
#include <cstdint>
#include <string>
#include <vector>

#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

inline constexpr const char* kEmbeddingsFormat = "fovea.embeddings";

struct EmbeddingsFile {
  Tensor embeddings;   // [N, D] f32
  Tensor positions;    // [N, 4] f32
  Tensor levels;       // [N] i32
  Tensor projected;    // [N, E] f32 or empty
  Tensor class_token, pooled, image_embeds, logits;  // [1, *] f32 or empty
  std::map<std::string, Tensor> extra;               // any other tensor of the file
  std::map<std::string, std::string> metadata;       // __metadata__ ("format" included)

  int64_t tokens() const { return embeddings.rank() == 2 ? embeddings.dim(0) : 0; }
  int64_t dim() const { return embeddings.rank() == 2 ? embeddings.dim(1) : 0; }
};

// Throws Error(invalid_argument) naming the tensor when a shape or dtype breaks the table
// above (N must agree across the per-token tensors), Error(io) when the file cannot be written.
void save_embeddings(const std::string& path, const EmbeddingsFile& file);
// The file's bytes, as save_embeddings writes them (for archives: the batch CLI's .tar shards).
std::vector<uint8_t> serialize_embeddings(const EmbeddingsFile& file);
// Throws Error(io) for an unreadable file and Error(corrupt_data) for a file that is not an
// embeddings file or breaks the table above (the message names the file and the tensor).
EmbeddingsFile load_embeddings(const std::string& path);
// The checks of save/load, without a file: throws Error(invalid_argument) naming the problem.
void validate_embeddings(const EmbeddingsFile& file);

}  // namespace fovea
FOVEA_API_END
