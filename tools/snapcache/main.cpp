// The `snapcache` command: see what is in the cache, prove it sound, make room. Every command is
// built on the library's public Store API; see docs/cli.md.
#include <CLI/CLI.hpp>

#include <cctype>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "output.h"
#include "commands/commands.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/log.h"
#include "snapcache/manifest.h"
#include "snapcache/version.h"

using namespace snapcache::cli;

namespace {

// "unknown command 'lss' (did you mean 'ls'?)", the suggestion only when a command's name is close.
std::string unknown_command(const std::string& word, const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands(std::function<bool(const CLI::App*)>{}))
    names.push_back(command->get_name());
  const auto near = nearest_name(word, names);
  return fmt::format("unknown command '{}'{}; `snapcache --help` lists the commands", word,
                     near ? fmt::format(" (did you mean '{}'?)", *near) : "");
}

// CLI11's message for bad arguments, in the words of the command's other errors: which command,
// what was wrong, where its options are listed. An unknown command is named as such.
std::string usage_error(const CLI::ParseError& e, const CLI::App& app) {
  const std::vector<CLI::App*> chosen = app.get_subcommands();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && chosen.empty()) {
    const std::vector<std::string> extra = app.remaining();
    if (!extra.empty() && !extra.front().starts_with("-")) return unknown_command(extra.front(), app);
  }
  std::string what = e.what();
  // "The following argument..." reads as the middle of our line; "ID is required" keeps its case.
  if (what.size() > 1 && std::islower(static_cast<unsigned char>(what[1])))
    what[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[0])));
  if (chosen.empty()) return fmt::format("{}; `snapcache --help` lists the options", what);
  const std::string name = chosen.front()->get_name();
  return fmt::format("{}: {}; `snapcache {} --help` lists its options", name, what, name);
}

}  // namespace

int main(int argc, char** argv) {
  // The library's own log lines (evictions, quarantines) would repeat what the commands report.
  snapcache::set_log_level(snapcache::LogLevel::error);

  // Named, so that the usage line says `snapcache`, not argv[0] (the wheel's path in site-packages).
  CLI::App app{"snapcache: inspect, verify and clean the snapshot cache of loaded PyTorch weights", "snapcache"};
  app.set_version_flag("--version", [] {
    auto torch = snapcache::current_torch_identity();
    return fmt::format("snapcache {} (format {}, torch {}, cuda {}, abi {})", snapcache::kVersion,
                       snapcache::kFormatVersion, torch.version,
                       torch.cuda_version.empty() ? "none" : torch.cuda_version, torch.cxx_abi);
  });
  app.footer("Exit codes: 0 ok, 1 damage found or an archive refused, 2 bad arguments, 3 no such entry, 4 entries in\n"
             "use were left, 5 configuration or cache error.\n"
             "`snapcache help COMMAND` (or `snapcache COMMAND --help`) shows a command's options.");
  app.require_subcommand(0, 1);
  Context ctx;
  app.add_option("--dir", ctx.options.dir, "Cache directory (default: SNAPCACHE_DIR, settings file, ~/.cache/snapcache)");
  app.add_option("--config", ctx.options.config_file, "Settings file to read");

  std::vector<Command> commands = {
      add_ls(app, ctx.options),    add_inspect(app, ctx.options), add_verify(app, ctx.options),
      add_evict(app, ctx.options), add_gc(app, ctx.options),      add_stats(app, ctx.options),
      add_config(app, ctx.options), add_why(app, ctx.options),   add_donors(app, ctx.options),
      add_export(app, ctx.options), add_import(app, ctx.options), add_keygen(app, ctx.options),
  };
  // `snapcache help [COMMAND]`: the same text as --help, for the way people ask.
  auto* help = app.add_subcommand("help", "Show the help of the tool, or of one command");
  std::string topic;
  help->add_option("command", topic, "A command");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end here too, with code 0: CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kOk : kUsage;
    print_error(usage_error(e, app));
    return kUsage;
  }
  try {
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run(ctx);
    if (help->parsed() && !topic.empty()) {
      for (const Command& c : commands)
        if (c.app->get_name() == topic) {
          print_own_text(c.app->help(app.get_name()));
          return kOk;
        }
      throw CliError(kUsage, unknown_command(topic, app));
    }
    // The tool's own help (app.help() would give the help of the command chosen, `help`).
    print_own_text(app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal));
    return kOk;
  } catch (const CliError& e) {
    print_error(e.what(), e.details());
    return e.code();
  } catch (const std::exception& e) {
    print_error(fmt::format("unexpected error: {}", e.what()));
    return kFailure;
  }
}
