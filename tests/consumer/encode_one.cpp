// encode_one IMAGE: tokenize and encode with a seeded random ViT-S/16 (no checkpoint needed).
#include <cstdio>

#include "fovea/encoder.hpp"
#include "fovea/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  fovea::Executor exec({.threads = 1});
  fovea::TokenizeParams params;
  params.alloc.budget_tokens = 64;
  fovea::Tokenization t = fovea::tokenize(fovea::load_image(argv[1]), {}, params, exec);
  fovea::VitModel model = fovea::VitModel::load("random:vit-s16");
  fovea::Encoding e = fovea::encode(model, t.batch.patches, t.batch.positions,
                                    {.image_width = t.pyramid.width(), .image_height = t.pyramid.height()}, exec);
  std::printf("embeddings %lld x %lld\n", static_cast<long long>(e.embeddings.dim(0)),
              static_cast<long long>(e.embeddings.dim(1)));
  return e.embeddings.dim(0) == t.batch.patches.dim(0) ? 0 : 1;
}
