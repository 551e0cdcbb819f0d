// Batch mode of `fovea tokenize` / `fovea encode`: many inputs (files, directories, WebDataset-
// style .tar shards), one output per image, a progress bar, bad images skipped and counted.
//
//   fovea encode shards/*.tar photos/ extra.jpg --model random:vit-b16 -o out/
//
// Inputs:
//   * an image file: output DIR/<name without extension>.safetensors;
//   * a directory: its image files (.jpg/.jpeg/.png, and with FFmpeg .webp, .gif, .tiff...:
//     fovea::image_file_extensions()), recursively, in name order, each as a file;
//   * a .tar shard (WebDataset: members <key>.<ext>): its image members, in archive order;
//     output one shard DIR/<shard name>.tar with a member <key>.safetensors per image.
// -o DIR writes into DIR (created); -o OUT.tar writes every output into that one shard.
// Every output is written atomically (temporary file + rename; a shard is renamed when it is
// complete). Two inputs that would write the same output are refused before any work.
// A bad image (unreadable, corrupt, too large, failing any stage) is reported on stderr as
// "fovea: warning: skipped ..." and counted; the batch goes on. Exit code 1 when any failed.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fovea/image.hpp"

namespace fovea::cli {

// True when `inputs` / `output` ask for batch mode: several inputs, a directory or a .tar
// input, or an output that is a directory (existing, or ending in '/') or a .tar shard.
bool is_batch(const std::vector<std::string>& inputs, const std::string& output);

// One image's work: returns the bytes of its output file (safetensors). Throws fovea::Error
// (or anything) for a bad image: the batch reports it and goes on.
using BatchFn = std::function<std::vector<uint8_t>(ImageU8 image, const std::string& source)>;

struct BatchReport {
  int64_t images = 0, ok = 0, failed = 0;
  double elapsed_s = 0;
  // When the first image was done (decode, model warm-up on first use: bf16 weight copies,
  // oneDNN kernels): steady_images_per_s leaves it out, for comparisons with warm pipelines.
  double first_image_s = 0;
  nlohmann::json failures = nlohmann::json::array();  // [{"input": ..., "error": ...}]
};

// Runs `fn` over every image of `inputs`, writing outputs under `output`. Decoding the next
// image overlaps the current one's work. Throws Error(invalid_argument) for a missing -o,
// unusable inputs or colliding outputs (before any work), Error(io) when an output cannot be
// written (that stops the batch: every later output would fail the same way).
BatchReport run_batch(const std::vector<std::string>& inputs, const std::string& output, const LoadOptions& load,
                      const BatchFn& fn);

nlohmann::json to_json(const BatchReport& r);

// Prints the report (JSON with `extra` merged in, or one line on stdout), and for failures one
// "fovea: error: K of N images failed" line on stderr. Returns the exit code: 0, or 1 when any
// image failed.
int report_batch(const BatchReport& r, const std::string& output, bool json, const nlohmann::json& extra);

}  // namespace fovea::cli
