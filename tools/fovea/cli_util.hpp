// Options shared by the subcommands that tokenize (tokenize, encode, ...): one definition of
// every flag, its parsing and its validation, so they behave the same everywhere.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "fovea/exec.hpp"
#include "fovea/image.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/vulkan.hpp"

namespace fovea::cli {

struct ExecOptions {
  int threads = 0;
  bool reference = false;
  std::string backend = "cpu";  // cpu | vulkan
  std::string device;           // Vulkan device: "" best, an index, or a name substring
  void add(CLI::App& app);
  ExecConfig config() const;
  // --backend vulkan: the device, or nullptr after printing one line to stderr saying why the
  // CPU is used instead (no Vulkan in this build, no device). --backend cpu: nullptr.
  // A --device that matches nothing is an error (Error(device)), not a silent fallback.
  std::unique_ptr<VulkanBackend> vulkan() const;
  // fovea::tokenize on the chosen backend (the CPU for --uniform, which has no Vulkan sampling, with
  // a note). Records "backend" (and "device") in `summary`.
  Tokenization tokenize(ImageU8 image, const Query& query, const TokenizeParams& params, Executor& ex,
                        nlohmann::json& summary) const;
};

struct TokenizeOptions {
  std::string image;                 // the first input (single-image mode)
  std::vector<std::string> inputs;   // every input: images, directories, .tar shards (batch.hpp)
  int budget = 273;
  int patch = 16;
  int max_level = -1;
  std::vector<std::string> fixations;  // "X,Y", "X,Y,R" or "X,Y,R,WEIGHT"
  std::vector<std::string> regions;    // "X0,Y0,X1,Y1" or with ",WEIGHT"
  std::string weights;                 // "detail=1,query=8,floor=0.5,information=0,saliency=0"
  float e0 = RelevanceParams{}.e0;
  float sharpness = AllocParams{}.sharpness;
  int lookahead = AllocParams{}.lookahead;
  float fine_bias = RelevanceParams{}.fine_bias;
  float fine_bias_floor = RelevanceParams{}.fine_bias_floor;
  float detail_focus = RelevanceParams{}.detail_focus;
  float fixation_spread = RelevanceParams{}.fixation_spread;
  bool uniform = false;
  std::string dtype = "f32";
  std::string mean, std;  // "R,G,B"
  bool no_normalize = false;
  uint64_t max_pixels = LoadOptions{}.max_pixels;
  bool no_exif = false;
  std::string foveation;  // "", "windows" or "mixed" ("": the command's default)
  int window_grid = 0;    // 0: the tower's own (encode), else 224 / P rounded
  bool keep_covered = false;
  CLI::Option* budget_opt = nullptr;
  CLI::Option* max_level_opt = nullptr;

  void add(CLI::App& app);  // the image positional and every tokenize flag
  // Parses and validates everything into params; throws Error(invalid_argument) naming the flag.
  // `dflt` is the command's foveation when --foveation is not given (encode: the model's), and
  // `grid` the windows' native grid when --window-grid is not given (0: 224 / P rounded). With
  // the windows foveation and no --budget, the budget is two native views (2·G²).
  TokenizeParams params(Foveation dflt = Foveation::mixed, int grid = 0) const;
  Query query() const;
  LoadOptions load_options() const;
};

// --store (tokenize, encode): what a paged token store would hold for the image's tokens.
struct StoreOptions {
  bool enabled = false;
  int64_t page_bytes = 64 << 10;
  std::string backend = "host";
  void add(CLI::App& app);
  // Before any work: Error(invalid_argument) naming the flag; token_dtype as given to --dtype.
  void validate(const std::string& token_dtype = "") const;
};

// Reserves a sequence of `dense_tokens` (the full-resolution grid) in a TokenStore, binds and
// writes the `tokens` ([N, ...] f32/f16/bf16, one row per token) at [0, N), gathers them back,
// and reports the store's accounting: pages, resident vs dense bytes, page overhead.
nlohmann::json store_report(const Tensor& tokens, int64_t dense_tokens, const StoreOptions& options);
void print_store_report(const nlohmann::json& store);

// "1.5,2" -> {1.5, 2}; throws Error(invalid_argument) mentioning `flag` on bad syntax.
std::vector<float> parse_floats(const std::string& text, const std::string& flag);

// --json's text: indented, and a string that is not UTF-8 (a file name in a legacy encoding)
// has U+FFFD in place of its bad bytes instead of failing the whole dump.
std::string json_text(const nlohmann::json& j);

// Summary of a tokenization for --json and the human-readable report. timings_ms holds each
// stage, `tokenize` (their sum) and `total`, which `timings_total_covers` lists the stages of: a
// command that times more stages into its total (encode) adds them to both.
nlohmann::json summarize(const Tokenization& t, const TokenizeParams& params, const Query& query);
void print_summary(const nlohmann::json& summary);
// One "fovea: warning:" line per fixation or region wholly outside the picture (query_outside).
// A video passes `frame` (named in the line: "... (frame 12) lies outside the 640x360 frame"),
// `seen` (each item is warned about once per run, not once per frame) and `prefix` (a newline
// that ends its progress line first).
struct OutsideWarning {
  long long frame = -1;  // -1: an image
  std::set<std::string>* seen = nullptr;
  const char* prefix = "";
};
void warn_query_outside(const Query& query, int width, int height, const OutsideWarning& how = {});

// How many values of an f32 tensor are NaN or infinite; with `what` non-empty and a count > 0,
// also one "fovea: warning:" line naming `what` (a checkpoint with NaN, infinite or huge
// weights loads and encodes without any error: this line is the only sign of it).
int64_t warn_nonfinite(const Tensor& values, const std::string& what, const char* prefix = "");

// The OpenMP wait policy this process runs with: the environment's OMP_WAIT_POLICY (main()
// sets PASSIVE for the commands that run OpenMP code, unless the caller chose), or "default".
const char* openmp_wait_policy();

// Process-wide, false in the fovea binary. The CLI fuzz target (fuzz/fuzz_cli.cpp) sets it and
// then calls the runners that honour it (video): they check every argument as usual and return
// 0 just before their first file access, so fuzzed argument vectors never read or write files.
bool& check_arguments_only();

}  // namespace fovea::cli
