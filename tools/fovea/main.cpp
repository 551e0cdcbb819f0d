// fovea — command-line front end. One subcommand per job; see `fovea --help`.
//
// Exit codes: 0 success, 1 the job failed (bad input file, I/O, device), 2 bad arguments.
// Every failure prints exactly one line on stderr, starting with "fovea: error:".
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <new>
#include <string_view>

#include "command.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/version_gen.hpp"

namespace fovea::cli {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace fovea::cli

namespace {

// CLI11 messages can span lines; the contract is one line. They also quote the arguments, so
// control characters are escaped and the length bounded as fovea::Error's own messages are.
std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return fovea::Error::printable(s);
}

}  // namespace

int main(int argc, char** argv) {
  // The OpenMP wait policy was chosen by the launcher that executed this program (launcher.cpp).
  using namespace fovea::cli;
  fovea::quiet_ffmpeg_log();  // FFmpeg's decoders (video, WebP, GIF...) would log on stderr
  // The CLI owns its process, so it sets its allocator's policy as it sets OpenMP's: glibc serves
  // blocks above its mmap threshold (128 KiB, raised on the fly) with fresh mappings and trims
  // freed heap tops, so a buffer allocated per frame or per image (a frame's embeddings,
  // its patch batch) faults its pages in again every time. A first touch cost ~8 µs a page on the
  // Zen 5 VM where this was measured: ~250 faults, 1.5-2 ms, of a 9.4 ms video frame. Keeping
  // freed memory for reuse costs at most the peak the process reached anyway. (32 MiB is glibc's
  // ceiling for the threshold; larger blocks are still mapped.)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  CLI::App app{"fovea — foveated visual tokens for vision-language models.\n"
               "An image and a query (fixations, regions, an embedding) in; a budgeted set of\n"
               "multi-scale patches out: full resolution where the query looks, coarse elsewhere.",
               "fovea"};
  app.set_version_flag("--version", FOVEA_VERSION_STRING);
  app.require_subcommand(1);
  app.footer("Run 'fovea <command> --help' for a command's options.\n"
             "Exit codes: 0 success, 1 failure, 2 bad arguments.");

  auto& commands = registry();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const Command& a, const Command& b) { return a.order < b.order; });
  std::vector<std::pair<CLI::App*, Runner>> runners;
  for (const Command& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    runners.emplace_back(sub, c.setup(*sub));
  }

  // CLI11 would call an unknown command a missing one; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const Command& c : commands) {
      known |= c.name == argv[1];
      names += (names.empty() ? "" : ", ") + c.name;
    }
    if (!known) {
      std::cerr << "fovea: error: unknown command '" << argv[1] << "' (commands: " << names << ")\n";
      return 2;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = "fovea";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    std::cerr << "fovea: error: " << one_line(e.what()) << " (see '" << where << " --help')\n";
    return 2;
  }

  // An option given an empty value (`-o "$OUT"` with OUT unset) would otherwise read as "not
  // given" and, for an output, write nothing with exit 0.
  for (const CLI::App* sub : app.get_subcommands())
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt->count() == 0 || opt->get_lnames().empty() || opt->get_expected_min() == 0) continue;  // flags
      for (const std::string& v : opt->results())
        if (v.empty()) {
          std::cerr << "fovea: error: --" << opt->get_lnames().front() << " was given an empty value (see 'fovea "
                    << sub->get_name() << " --help')\n";
          return 2;
        }
    }

  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
    return 2;
  } catch (const fovea::Error& e) {
    std::cerr << "fovea: error: " << one_line(e.what()) << '\n';
    return e.code() == fovea::Errc::invalid_argument ? 2 : 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "fovea: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "fovea: error: internal error: " << one_line(e.what()) << '\n';
    return 1;
  }
}
