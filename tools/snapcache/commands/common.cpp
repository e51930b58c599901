#include "commands/commands.h"

#include "snapcache/text.h"

namespace snapcache::cli {

void add_common_options(CLI::App& command, GlobalOptions& options) {
  command.add_option("--dir", options.dir, "Cache directory (default: SNAPCACHE_DIR, settings file, ~/.cache/snapcache)");
  command.add_option("--config", options.config_file, "Settings file to read (default: SNAPCACHE_CONFIG, ~/.config/snapcache/snapcache.conf)");
  command.add_flag("--json", options.json, "Print one JSON object on stdout instead of text (errors stay text, on stderr)");
}

CLI::Validator size_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto parsed = parse_size(text);
        return parsed ? std::string() : parsed.status().message();
      },
      "SIZE", "size");
}

CLI::Validator age_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto parsed = parse_age_seconds(text);
        return parsed ? std::string() : parsed.status().message();
      },
      "AGE", "age");
}

std::uint64_t parse_size_arg(const std::string& text) {
  auto parsed = parse_size(text);
  if (!parsed) throw CliError(kUsage, parsed.status().message());
  return *parsed;
}

std::int64_t parse_age_arg(const std::string& text) {
  auto parsed = parse_age_seconds(text);
  if (!parsed) throw CliError(kUsage, parsed.status().message());
  return *parsed;
}

}  // namespace snapcache::cli
