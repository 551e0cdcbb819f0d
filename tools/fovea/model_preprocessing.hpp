// The model's input contract applied to the tokenize flags (encode, tokenize --query-embedding),
// and --precision resolved against the CPU (encode, video).
// Only for builds with the encoder: include it where fovea/encoder.hpp is available.
#pragma once

#include <cstdio>
#include <string>

#include "cli_util.hpp"
#include "fovea/encoder.hpp"

namespace fovea::cli {

// Sets `norm` to the model's input contract (fovea::normalization) for whatever --mean / --std
// did not give; --no-normalize leaves it alone. Returns where the numbers came from, for
// reports and the file's metadata (e.g. "model: preprocessor_config.json").
inline std::string apply_model_preprocessing(const TokenizeOptions& tok, const InputContract& contract,
                                             Normalization& norm) {
  if (tok.no_normalize) return "--no-normalize (x/255)";
  if (!tok.mean.empty() && !tok.std.empty()) return "--mean/--std";
  const Normalization model = normalization(contract);
  if (tok.mean.empty()) norm.mean = model.mean;
  if (tok.std.empty()) norm.std = model.std;
  if (!tok.mean.empty()) return "--mean; std from the model (" + contract.source + ")";
  if (!tok.std.empty()) return "--std; mean from the model (" + contract.source + ")";
  return "model: " + contract.source;
}

// --precision as it will run (fovea::runnable_precision): bf16 on a CPU
// without bf16 kernels runs fp32, said once on stderr. Reports and files give the precision
// that ran, and `precision_requested` when it differs.
inline Precision runnable_precision_noted(Precision asked) {
  const Precision runs = runnable_precision(asked);
  if (runs != asked && asked == Precision::int8)
    std::fprintf(stderr, "fovea: warning: --precision int8: this CPU has no int8 vector kernels (AVX2 or VNNI); running fp32\n");
  else if (runs != asked)
    std::fprintf(stderr,
                 "fovea: warning: --precision bf16: this CPU has no native bf16 matrix kernels (AVX512_BF16 or AMX); "
                 "running fp32\n");
  return runs;
}

// What a user must know about a loaded model before reading its embeddings, once on stderr:
// random weights, and a projector in the checkpoint that is not run (VitConfig::ignored_projector).
inline void note_model(const VitModel& model, const std::string& spec) {
  if (model.is_random())
    std::fprintf(stderr, "fovea: note: %s has RANDOM weights; its embeddings are for benchmarking only\n", spec.c_str());
  if (!model.config().ignored_projector.empty())
    std::fprintf(stderr,
                 "fovea: note: %s: the checkpoint's projector is not applied (%s: it groups a uniform grid of "
                 "tokens); the embeddings are the vision tower's\n",
                 spec.c_str(), model.config().ignored_projector.c_str());
}

}  // namespace fovea::cli
