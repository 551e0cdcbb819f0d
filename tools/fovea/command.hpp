// Subcommand registry of the fovea CLI. Each cmd_<name>.cpp registers itself:
//
//   static fovea::cli::Registration reg{{"tokenize", "Turn an image and a query into tokens", 10,
//                                        [](CLI::App& sub) -> fovea::cli::Runner { ... }}};
//
// `setup` adds the subcommand's options to `sub` (binding them to state it owns) and returns
// the function main() calls when that subcommand was chosen. Runners return the exit code;
// they report failures by throwing fovea::Error, which main() turns into one line.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace fovea::cli {

using Runner = std::function<int()>;

struct Command {
  std::string name;
  std::string description;
  int order = 100;  // position in `fovea --help`
  std::function<Runner(CLI::App&)> setup;
};

std::vector<Command>& registry();

struct Registration {
  explicit Registration(Command c) { registry().push_back(std::move(c)); }
};

}  // namespace fovea::cli
