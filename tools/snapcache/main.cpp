// The `snapcache` command: see what is in the cache, prove it sound, make room. Every command is
// built on the library's public Store API; see docs/cli.md.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "output.h"
#include "commands/commands.h"
#include "snapcache/log.h"
#include "snapcache/snapshot.h"
#include "snapcache/version.h"

using namespace snapcache::cli;

int main(int argc, char** argv) {
  // The library's own log lines (evictions, quarantines) would repeat what the commands report.
  snapcache::set_log_level(snapcache::LogLevel::error);

  CLI::App app{"snapcache: inspect, verify and clean the snapshot cache of loaded PyTorch weights"};
  app.set_version_flag("--version", [] {
    auto torch = snapcache::current_torch_identity();
    return fmt::format("snapcache {} (format {}, torch {}, cuda {}, abi {})", snapcache::kVersion,
                       snapcache::kFormatVersion, torch.version,
                       torch.cuda_version.empty() ? "none" : torch.cuda_version, torch.cxx_abi);
  });
  app.footer("Exit codes: 0 ok, 1 damage found, 2 bad arguments, 3 no such entry, 4 entries in use were left,\n"
             "5 configuration or cache error. See docs/cli.md.");
  app.require_subcommand(0, 1);
  Context ctx;
  app.add_option("--dir", ctx.options.dir, "Cache directory (default: SNAPCACHE_DIR, settings file, ~/.cache/snapcache)");
  app.add_option("--config", ctx.options.config_file, "Settings file to read");

  std::vector<Command> commands = {
      add_ls(app, ctx.options),    add_inspect(app, ctx.options), add_verify(app, ctx.options),
      add_evict(app, ctx.options), add_gc(app, ctx.options),      add_stats(app, ctx.options),
      add_config(app, ctx.options), add_why(app, ctx.options),   add_donors(app, ctx.options),
      add_export(app, ctx.options), add_import(app, ctx.options),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end here too, with code 0.
    int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  }
  try {
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run(ctx);
    print_own_text(app.help());
    return kOk;
  } catch (const CliError& e) {
    std::fflush(stdout);
    say_to(stderr, "snapcache: {}\n", e.what());
    for (const auto& line : e.details()) say_to(stderr, "  {}\n", line);
    return e.code();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    say_to(stderr, "snapcache: unexpected error: {}\n", e.what());
    return kFailure;
  }
}
