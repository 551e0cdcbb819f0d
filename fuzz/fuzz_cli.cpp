// The CLI's argument parsing: the input is an argument vector (arguments separated by NUL
// bytes), parsed by the real subcommands (tools/fovea/cmd_*.cpp register themselves, as in the
// fovea binary), then validated as the tokenize-family runners do before any work
// (TokenizeOptions::params/query, ExecOptions, StoreOptions::validate); the `video` runner
// runs with check_arguments_only() set, so it checks its own flags (--every/--fps,
// --max-frames, --reuse, thresholds, --check/--store without --model, ...) and returns before
// its first file access. No other command runs: a fuzzed vector must never read or write files. Bad arguments must be CLI11's ParseError or a
// fovea::Error; anything else escaping (std::invalid_argument from a number conversion,
// std::out_of_range) would crash the real CLI's error path into "internal error" and is a
// finding.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "command.hpp"
#include "fuzz_util.hpp"

namespace fovea::cli {
std::vector<Command>& registry() {  // main.cpp's definition; main.cpp itself is not linked
  static std::vector<Command> commands;
  return commands;
}
}  // namespace fovea::cli

namespace {

// Subcommands whose runner stops after its argument checks when check_arguments_only() is set.
const std::set<std::string> kChecksOnly = {"video"};

std::vector<std::string> split_args(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"fovea"};
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(char(data[i]));
    }
  }
  if (!cur.empty()) args.push_back(cur);
  return args;
}

template <typename F>
void parse_guarded(F&& f) {
  try {
    f();
  } catch (const CLI::Success&) {
  } catch (const CLI::ParseError&) {
  } catch (const fovea::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: a non-fovea exception escaped argument parsing (%s): %s\n", typeid(e).name(), e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fovea::cli::check_arguments_only() = true;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> args = split_args(data, size);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int argc = int(args.size());

  // 1. The whole command line, every subcommand, as main() builds it (help/version included).
  //    Then the chosen subcommand's runner, for the runners that honour check_arguments_only()
  //    (they validate everything and return before touching a file): `video`.
  //    Every subcommand is registered by name, as in main(), but its options are added (its
  //    setup() runs) only when CLI11 selects it: from its pre-parse callback, which CLI11 calls
  //    once the subcommand is chosen and before it reads any of the subcommand's arguments. The
  //    chosen subcommand therefore parses with exactly the options main() gives it; the others
  //    are never consulted for options (CLI11 looks up the current subcommand's options, its
  //    parents' with fallthrough, and subcommand names, which are all there). Building all six
  //    subcommands' ~200 options for every input was most of this target's time.
  parse_guarded([&] {
    CLI::App app{"fovea", "fovea"};
    app.set_version_flag("--version", "fuzz");
    app.require_subcommand(1);
    // The runners own the state the options write into (as in main): keep them alive.
    std::vector<std::pair<CLI::App*, fovea::cli::Runner>> runners;
    for (const fovea::cli::Command& c : fovea::cli::registry()) {
      CLI::App* sub = app.add_subcommand(c.name, c.description);
      sub->preparse_callback([&runners, &c, sub](std::size_t) { runners.emplace_back(sub, c.setup(*sub)); });
    }
    app.parse(argc, argv.data());
    for (auto& [sub, run] : runners) {
      if (sub->parsed() && kChecksOnly.count(sub->get_name())) {
        if (run() != 0) __builtin_trap();  // a checks-only run either throws or returns 0
      }
    }
  });

  // 2. The tokenize flags and their validation (the runners' first step), on argv[1..].
  parse_guarded([&] {
    CLI::App app{"tokenize", "tokenize"};
    fovea::cli::TokenizeOptions tok;
    fovea::cli::ExecOptions exec;
    fovea::cli::StoreOptions store;
    tok.add(app);
    exec.add(app);
    store.add(app);
    app.allow_extras();
    app.parse(argc, argv.data());
    (void)tok.params();
    (void)tok.query();
    (void)tok.load_options();
    (void)exec.config();
    if (store.enabled) store.validate(tok.dtype);
  });
  return 0;
}
