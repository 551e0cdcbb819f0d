// examples/llama_cpp_embeddings.cpp — feed fovea's `projected` embeddings to a llama.cpp LLM.
//
// NOT BUILT by this repository: llama.cpp is not packaged in Debian 12, so nothing here links
// against it and no test runs this file. It is written against llama.cpp's public C API
// (include/llama.h, tools/mtmd/mtmd.h, mtmd-helper.h, late 2025); build it inside a llama.cpp
// checkout, e.g.
//
//   c++ -std=c++20 -O2 examples/llama_cpp_embeddings.cpp -I$FOVEA/include -I$LLAMA/include \
//       -I$LLAMA/ggml/include -I$LLAMA/tools/mtmd -L$LLAMA/build/bin -lllama -lmtmd \
//       -L$FOVEA/build -lfovea ... -o llama_cpp_embeddings
//
// The pipeline:
//   fovea encode photo.jpg --model mmproj-model-f16.gguf --fixation 512,300 --budget 273 -o emb.safetensors
//   ./llama_cpp_embeddings llava-v1.5-7b.Q4_K_M.gguf emb.safetensors "What is written on the sign?"
//
// fovea runs the mmproj's vision tower and LLaVA projector on its own foveated tokens and
// writes `projected` [N, n_embd] (float32, one row per token, batch order). The language model
// takes those rows where its prompt has the image: here through a llama_batch whose `embd`
// field carries the rows (llama_batch_init(n, n_embd, 1)), at positions n_past .. n_past+N−1.
// That works for any N, which is the point of a foveated budget. When N equals what llama.cpp's
// own preprocessing would give for the image (e.g. a uniform native grid: `--uniform` at the
// mmproj's image_size), the mtmd path works too: mtmd_tokenize() the prompt with the image
// marker and hand fovea's rows to mtmd_helper_decode_image_chunk() for the image chunk, which
// also handles the models that need non-causal attention over the image (see
// decode_with_mtmd below).
//
// Positions: LLaVA-style models (1-D RoPE) take consecutive positions for the image rows; the
// spatial layout is already inside the embeddings (the vision tower's position embeddings, which
// fovea samples at each token's true centre). M-RoPE models (Qwen2-VL) need 2-D positions and a
// different projector, which fovea does not produce.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fovea/safetensors.hpp"
#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"

namespace {

// Decodes `tokens` (text) at n_past; returns the new n_past or −1.
int decode_text(llama_context* ctx, std::vector<llama_token> tokens, int n_past) {
  const int n_batch = int(llama_n_batch(ctx));
  for (size_t i = 0; i < tokens.size(); i += size_t(n_batch)) {
    const int n = int(std::min(tokens.size() - i, size_t(n_batch)));
    llama_batch b = llama_batch_get_one(tokens.data() + i, n);  // positions follow the KV cache
    if (llama_decode(ctx, b) != 0) return -1;
    n_past += n;
  }
  return n_past;
}

// Decodes N embedding rows [N, n_embd] at positions n_past .. n_past+N−1 of sequence 0.
int decode_embeddings(llama_context* ctx, const float* rows, int n_rows, int n_embd, int n_past) {
  const int n_batch = int(llama_n_batch(ctx));
  llama_batch b = llama_batch_init(n_batch, n_embd, 1);  // embd != 0: b.embd holds n_batch·n_embd floats
  for (int i = 0; i < n_rows; i += n_batch) {
    const int n = std::min(n_batch, n_rows - i);
    std::memcpy(b.embd, rows + size_t(i) * n_embd, size_t(n) * n_embd * sizeof(float));
    for (int j = 0; j < n; ++j) {
      b.pos[j] = n_past + i + j;
      b.n_seq_id[j] = 1;
      b.seq_id[j][0] = 0;
      b.logits[j] = false;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b) != 0) {
      llama_batch_free(b);
      return -1;
    }
  }
  llama_batch_free(b);
  return n_past + n_rows;
}

std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text, bool add_special) {
  const int n = -llama_tokenize(vocab, text.data(), int32_t(text.size()), nullptr, 0, add_special, true);
  std::vector<llama_token> out(size_t(std::max(n, 0)));
  llama_tokenize(vocab, text.data(), int32_t(text.size()), out.data(), int32_t(out.size()), add_special, true);
  return out;
}

// The mtmd route, for an N that matches llama.cpp's own image chunk: `chunk` comes from
// mtmd_tokenize() of a prompt holding mtmd_default_marker() and a bitmap of the same image.
[[maybe_unused]] int decode_with_mtmd(mtmd_context* mctx, llama_context* ctx, const mtmd_input_chunk* chunk,
                                      std::vector<float>& projected, int n_past) {
  const mtmd_image_tokens* img = mtmd_input_chunk_get_tokens_image(chunk);
  if (!img || mtmd_image_tokens_get_n_tokens(img) * size_t(llama_model_n_embd(llama_get_model(ctx))) != projected.size())
    return -1;  // fovea's N differs from the chunk's: use decode_embeddings() instead
  llama_pos new_n_past = 0;
  if (mtmd_helper_decode_image_chunk(mctx, ctx, chunk, projected.data(), n_past, 0, int32_t(llama_n_batch(ctx)),
                                     &new_n_past, nullptr, nullptr) != 0)
    return -1;
  return int(new_n_past);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s LLM.gguf EMBEDDINGS.safetensors PROMPT\n", argv[0]);
    return 2;
  }
  // fovea's file: `projected` [N, n_embd] float32.
  const fovea::SafetensorsFile f = fovea::SafetensorsFile::open(argv[2]);
  const auto* pe = f.find("projected");
  if (!pe || pe->shape.size() != 2 || pe->dtype_name != "F32") {
    std::fprintf(stderr, "%s has no F32 `projected` tensor (encode with an mmproj .gguf that has a projector)\n", argv[2]);
    return 1;
  }
  const fovea::Tensor projected = f.load(*pe);
  const int n_rows = int(pe->shape[0]), width = int(pe->shape[1]);

  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) return 1;
  if (llama_model_n_embd(model) != width) {
    std::fprintf(stderr, "projected rows have %d values, the LLM's n_embd is %d: mmproj and LLM do not match\n", width,
                 llama_model_n_embd(model));
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 4096;
  llama_context* ctx = llama_init_from_model(model, cp);
  const llama_vocab* vocab = llama_model_get_vocab(model);

  // LLaVA-1.5's template: "USER: <image>\n{prompt}\nASSISTANT:".
  int n_past = decode_text(ctx, tokenize(vocab, "USER: ", true), 0);
  if (n_past >= 0) n_past = decode_embeddings(ctx, projected.data<float>(), n_rows, width, n_past);
  if (n_past >= 0) n_past = decode_text(ctx, tokenize(vocab, std::string("\n") + argv[3] + "\nASSISTANT:", false), n_past);
  if (n_past < 0) {
    std::fprintf(stderr, "llama_decode failed\n");
    return 1;
  }
  llama_sampler* smpl = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(smpl, llama_sampler_init_greedy());
  for (int i = 0; i < 256; ++i) {
    llama_token t = llama_sampler_sample(smpl, ctx, -1);
    if (llama_vocab_is_eog(vocab, t)) break;
    char piece[256];
    const int n = llama_token_to_piece(vocab, t, piece, sizeof piece, 0, true);
    if (n > 0) std::fwrite(piece, 1, size_t(n), stdout);
    if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) break;
  }
  std::printf("\n");
  llama_sampler_free(smpl);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
