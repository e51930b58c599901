// One function per command: each adds its subcommand to the app and returns how to run it.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "cli.h"

namespace snapcache::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int(Context&)> run;  // returns an ExitCode; throws CliError
};

// --dir, --config and --json (when the command prints something a script may read).
void add_common_options(CLI::App& command, GlobalOptions& options);

// CLI11 validators that reject what parse_size/parse_age_seconds (snapcache/text.h) cannot parse, with its message.
CLI::Validator size_validator();
CLI::Validator age_validator();
std::uint64_t parse_size_arg(const std::string& text);
std::int64_t parse_age_arg(const std::string& text);

Command add_ls(CLI::App& app, GlobalOptions& options);
Command add_inspect(CLI::App& app, GlobalOptions& options);
Command add_verify(CLI::App& app, GlobalOptions& options);
Command add_evict(CLI::App& app, GlobalOptions& options);
Command add_gc(CLI::App& app, GlobalOptions& options);
Command add_stats(CLI::App& app, GlobalOptions& options);
Command add_config(CLI::App& app, GlobalOptions& options);
Command add_why(CLI::App& app, GlobalOptions& options);
Command add_donors(CLI::App& app, GlobalOptions& options);
Command add_export(CLI::App& app, GlobalOptions& options);
Command add_import(CLI::App& app, GlobalOptions& options);
Command add_keygen(CLI::App& app, GlobalOptions& options);

}  // namespace snapcache::cli
