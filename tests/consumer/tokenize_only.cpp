// tokenize_only IMAGE: the smallest program a user writes against an installed fovea.
#include <cstdio>

#include "fovea/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  fovea::Executor exec({.threads = 2});
  fovea::Query query;
  query.fixations.push_back({250, 120});
  fovea::TokenizeParams params;
  params.alloc.budget_tokens = 100;
  fovea::Tokenization t = fovea::tokenize(fovea::load_image(argv[1]), query, params, exec);
  std::printf("tokens %lld\n", static_cast<long long>(t.batch.patches.dim(0)));
  return t.batch.patches.dim(0) > 0 && t.batch.patches.dim(0) <= 100 ? 0 : 1;
}
