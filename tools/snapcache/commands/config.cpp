// snapcache config: the effective configuration and where each value came from.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands/commands.h"
#include "render.h"

namespace snapcache::cli {
namespace {

const char* source_name(const Config& c, const std::string& setting) {
  auto it = c.sources.find(setting);
  return to_string(it == c.sources.end() ? ConfigSource::default_value : it->second);
}

int run(Context& ctx) {
  const Config& c = ctx.config();
  struct Row {
    const char* name;  // in --json
    const char* label;
    const char* setting;
    json value;
    std::string text;
  };
  // No usable home and nothing named a directory: none, and why (Config::default_directory).
  const bool no_directory = c.directory.empty();
  const std::vector<Row> rows = {
      {"directory", "directory", "directory", no_directory ? json(nullptr) : json(c.directory),
       no_directory ? "none" : c.directory},
      {"enabled", "enabled", "mode", c.enabled(), c.enabled() ? "yes" : "no"},
      {"capacity_bytes", "capacity", "capacity", c.capacity_bytes, size(c.capacity_bytes)},
      {"reserve_bytes", "reserve", "reserve", c.reserve_free_bytes, size(c.reserve_free_bytes)},
      {"secondary", "secondary", "secondary", c.secondary_directory.empty() ? json(nullptr) : json(c.secondary_directory),
       c.secondary_directory.empty() ? "none" : c.secondary_directory},
      {"trusted_archive_keys", "trusted archive keys", "trusted_archive_keys", c.trusted_archive_keys,
       c.trusted_archive_keys.empty() ? "none (import refuses archives, unless --trust-unsigned)"
                                      : fmt::format("{}", fmt::join(c.trusted_archive_keys, ", "))},
  };
  const std::string default_file = Config::default_config_file();
  if (ctx.options.json) {
    json settings = json::object();
    for (const auto& r : rows) {
      std::string from = c.origin(r.setting);
      settings[r.name] = {{"value", r.value},
                          {"source", source_name(c, r.setting)},
                          {"origin", from.empty() ? json(nullptr) : json(from)}};
    }
    if (no_directory) settings["directory"]["why_none"] = Config::missing_directory().message();
    print_json({{"settings", settings},
                {"config_file", c.config_file.empty() ? json(nullptr) : json(c.config_file)},
                {"default_config_file", default_file}});
    return kOk;
  }
  Table t;
  for (const auto& r : rows) {
    std::string from = c.origin(r.setting);
    t.add({r.label, r.text, from.empty() ? source_name(c, r.setting)
                                           : fmt::format("{} ({})", source_name(c, r.setting), from)});
  }
  t.print();
  std::string file = c.config_file;
  if (file.empty()) file = default_file.empty() ? "none" : fmt::format("none ({} does not exist)", default_file);
  say("settings file: {}\n", file);
  if (no_directory) say("{}\n", Config::missing_directory().message());
  return kOk;
}

}  // namespace

Command add_config(CLI::App& app, GlobalOptions& options) {
  auto* cmd = app.add_subcommand("config", "Show the effective configuration and where each value came from");
  add_common_options(*cmd, options);
  return {cmd, [](Context& ctx) { return run(ctx); }};
}

}  // namespace snapcache::cli
