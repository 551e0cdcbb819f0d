// fovea convert CKPT -o OUT [--dtype bf16|int8]: a safetensors checkpoint rewritten so that a
// one-shot process maps it ready to run (convert_checkpoint in fovea/encoder.hpp).
#include <cstdio>
#include <memory>
#include <string>

#include "cli_util.hpp"
#include "command.hpp"
#include "fovea/encoder.hpp"

namespace fovea::cli {
namespace {

struct ConvertCommand {
  std::string path, output, dtype = "bf16";

  int run() const {
    const Precision p = dtype == "int8" ? Precision::int8 : Precision::bf16;
    const ConvertResult r = convert_checkpoint(path, output, p);
    std::printf("wrote %s: %d tensors, %.1f MB%s\n", r.path.c_str(), r.tensors, double(r.bytes) / 1e6,
                r.int8_matrices ? (", " + std::to_string(r.int8_matrices) + " layer matrices also as int8").c_str() : "");
    return 0;
  }
};

Runner setup_convert(CLI::App& sub) {
  auto cmd = std::make_shared<ConvertCommand>();
  sub.add_option("CKPT", cmd->path, "A safetensors checkpoint: a .safetensors file, or a directory with model.safetensors")
      ->required();
  sub.add_option("-o,--output", cmd->output,
                 "Where to write: a .safetensors file, or a directory (model.safetensors and the checkpoint's JSON files)")
      ->required();
  sub.add_option("--dtype", cmd->dtype,
                 "bf16: matrices stored as bfloat16 (vectors float32); int8: the same plus the layers' matrices "
                 "quantized for --precision int8 (per output channel, with their scales)")
      ->check(CLI::IsMember({"bf16", "int8"}))
      ->default_val("bf16");
  sub.footer("Examples:\n  fovea convert vit_b16.safetensors -o vit_b16_int8.safetensors --dtype int8\n"
             "  fovea convert clip-vit-base-patch16/ -o clip-b16-bf16/");
  return [cmd] { return cmd->run(); };
}

Registration reg_convert{{"convert", "Rewrite a checkpoint for fast loading: bf16 matrices, or int8 layer matrices too", 27,
                          setup_convert}};

}  // namespace
}  // namespace fovea::cli
