// fovea/compress.hpp — token compression: codecs over embeddings, their trained state, and the
// quadtree-aware sibling merge.
//
//   std::unique_ptr<fovea::Codec> c = fovea::make_codec("int8", 768);    // or "pca:128+int8", "opq:96"
//   fovea::Tensor training(fovea::DType::f32, {1000, 768});  // embeddings of the model, for its codebook
//   c->train(training);                             // no-op for fp16/bf16
//   fovea::Tensor embeddings(fovea::DType::f32, {273, 768});
//   fovea::Tensor codes = c->encode(embeddings);    // [N, c->bytes_per_token()] u8
//   fovea::Tensor back = c->decode(codes);          // [N, 768] f32
//   fovea::save_codebook(*c, "int8.safetensors", {{"model", "clip-vit-b16"}});
//   std::unique_ptr<fovea::Codec> same = fovea::load_codebook("int8.safetensors");
//
// A codec maps one token's embedding (D floats) to a fixed-size record of bytes_per_token()
// bytes, and back. Records are plain bytes with no alignment requirement, so a TokenStore
// page holds them packed (StoreConfig::codec). What a codec learns (scales, principal axes,
// codebooks) is its state: trained once per model on [n, D] f32 vectors, saved apart from the
// tokens as safetensors ("codebook"), and named by a BLAKE2b-256 hash that compressed files
// carry as their reference to it.
//
// Codecs (spec strings, as the CLI takes them):
//   fp16, bf16      2·D bytes, round to nearest even; nothing to learn.
//   int8            D bytes: per dimension an 8-bit affine code, x ≈ lo[d] + step[d]·q,
//                   lo and step calibrated on training data (min/max widened by 1/32 of the
//                   range each side; values outside clamp).
//   pca:K           mean and the top-K principal axes of the training data; 2·K bytes (fp16
//                   coefficients).
//   pca:K+int8      the same, coefficients coded by int8 (calibrated on the training
//                   coefficients): K bytes.
//   pq:M, opq:M     FAISS product quantizer, M sub-quantizers of 256 centroids (8 bits), M
//                   bytes; D % M == 0. opq first rotates by FAISS's OPQ matrix, learned jointly.
//   faiss:FACTORY   any FAISS index_factory string as a standalone codec (sa_encode/sa_decode),
//                   e.g. faiss:PCA128,SQ8: FAISS's own pipelines, for comparison in one run.
// Training errors (Error(unsupported), naming the codec and the counts) when there are fewer
// vectors than the codec can learn from: 256 for pq/opq (one per centroid), K + 1 for pca,
// 2 for int8. Below recommended_train_vectors() (FAISS's 39 per centroid) it trains but
// the result is likely worse; the CLI says so.
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/codec_interface.hpp"
#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

// "fp16", "bf16", "int8", "pca:K", "pca:K+int8", "pq:M", "opq:M" for D-dimensional tokens.
// Throws Error(invalid_argument) for an unknown spec or impossible parameters (K > D, D % M).
std::unique_ptr<Codec> make_codec(std::string_view spec, int64_t dim);
// The spec strings above, for help texts.
std::vector<std::string> codec_spec_forms();

// Codebook files: safetensors holding the state tensors, with metadata format=fovea.codebook,
// codec=<spec>, dim, hash=<state_hash()>, plus `extra` (the CLI adds model and train_vectors).
// Written atomically.
void save_codebook(const Codec& codec, const std::string& path, const std::map<std::string, std::string>& extra = {});
// Throws Error(io) when unreadable, Error(corrupt_data) for a file that is not a codebook or
// whose tensors do not match its spec. `metadata`, when given, receives the file's metadata.
//
// A faiss:FACTORY codebook holds FAISS's own serialised index, and faiss::read_index trusts
// the sizes it reads (FAISS does not support loading untrusted index files): a damaged or
// crafted one can crash the process or exhaust its memory. Such a codebook is therefore refused
// with Error(unsupported), before a byte of it reaches FAISS, unless `trust_faiss` says the
// caller made it or trusts its source. fovea's own codecs (int8, pca, pq, opq) are plain
// tensors checked against their spec, safe to load from anywhere.
struct CodebookLoadOptions {
  bool trust_faiss = false;
};
// True for a codec spec whose state is a FAISS serialised index ("faiss:...").
bool codec_uses_faiss_serialization(std::string_view spec);
std::unique_ptr<Codec> load_codebook(const std::string& path, std::map<std::string, std::string>* metadata = nullptr,
                                     const CodebookLoadOptions& options = {});

// ---- Quadtree-aware merge ------------------------------------------------------------------------
//
// Four sibling tokens at level l — the four quadrants of one level-(l+1) box of the allocation's
// quadtree — whose embeddings are nearly identical become one token at level l+1: its embedding
// is their mean, its position the parent box (centre, side doubled, level + 1). Repeats up the
// levels, so merged parents merge again. It reduces N, not bytes per token.
//
// Siblings are found from `positions` ([N, 4]: centre x, centre y, side px, level, as fovea
// tokenize/encode write them): a token at level l with side s covers [cx - s/2, cx + s/2) and
// its parent is the box of side 2s on the grid of that side.
struct MergeParams {
  float min_cosine = 0.98f;  // every sibling's cosine to the four's mean must reach this
  int max_level = 30;        // no parent above this level
};

struct MergeResult {
  Tensor embeddings;  // [N', D] f32, sorted by level (one run per level), then by y, x
  Tensor positions;   // [N', 4] f32
  Tensor levels;      // [N'] i32
  Tensor parent;      // [N] i32: the row of `embeddings` each input token ended up in
  int64_t groups_merged = 0;                // merges of four (a merged parent counts again)
  std::map<int, int64_t> groups_per_level;  // children's level -> merges
};

// Throws Error(invalid_argument) for inconsistent shapes, Error(corrupt_data) for positions
// that are not on a quadtree grid.
MergeResult merge_siblings(const Tensor& embeddings, const Tensor& positions, const MergeParams& params = {});
// Per input token, its merged embedding (what a consumer of the merged tokens sees in its
// place): [N, D] f32.
Tensor unmerge(const MergeResult& merged);

// ---- Rate–distortion ----------------------------------------------------------------------------

struct Distortion {
  double mean_cosine = 0, min_cosine = 0;
  double relative_mse = 0;  // sum ||x - y||^2 / sum ||x||^2
  // Share of tokens whose nearest other token (by cosine) is the same in `decoded` as in
  // `original`.
  double nn_agreement = 0;
};
// `original` and `decoded`: [N, D] f32. `threads` as Codec::set_threads.
Distortion measure_distortion(const Tensor& original, const Tensor& decoded, int threads = 1);

}  // namespace fovea

namespace fovea {

// One row of the rate–distortion report: a trained codec measured on [N, D] f32 embeddings.
struct RateDistortionRow {
  std::string codec;
  int64_t bytes_per_token = 0;
  double ratio_vs_fp32 = 0;      // 4·D / bytes_per_token
  Distortion distortion;
  double train_ms = 0;
  double encode_gb_s = 0;        // f32 input bytes per second (best of the repetitions)
  double decode_gb_s = 0;        // f32 output bytes per second
  double memcpy_gb_s = 0;        // memcpy of the same f32 bytes, in the same run
  int64_t tokens_in = 0, tokens_out = 0;  // differ for the merge row only
};

// Codec specs the report runs by default for D-dimensional tokens: fp16, bf16, int8 and
// PCA/PQ/OPQ settings at D/6 and D/12 bytes a token (128 and 64 for D = 768).
std::vector<std::string> default_report_codecs(int64_t dim);
// Encodes and decodes `eval` with a trained codec `reps` times (the best time counts) and
// measures the distortion.
RateDistortionRow measure_codec(const Codec& codec, const Tensor& eval, int reps = 3);

}  // namespace fovea
FOVEA_API_END
