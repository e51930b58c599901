#include "cli.h"

#include <unistd.h>

#include <climits>

#include <fmt/format.h>

#include "render.h"

namespace snapcache::cli {

const Config& Context::config() {
  if (config_) return *config_;
  auto loaded = Config::load(options.config_file);
  if (!loaded) throw CliError(kFailure, loaded.status().message());
  Config c = std::move(*loaded);
  if (!options.dir.empty()) {
    std::string dir = options.dir;
    if (dir[0] != '/') {
      char cwd[PATH_MAX];
      if (::getcwd(cwd, sizeof cwd) == nullptr) throw CliError(kFailure, "cannot resolve --dir: no current directory");
      dir = std::string(cwd) + "/" + dir;
    }
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    c.directory = dir;
    c.sources["directory"] = ConfigSource::flag;
    c.flags["directory"] = "--dir";
  }
  config_ = std::move(c);
  return *config_;
}

Store& Context::store() {
  if (store_) return *store_;
  Config c = config();
  auto fs = posix_file_system();
  auto st = fs->stat(c.directory);
  if (!st)
    throw CliError(st.status().code() == StatusCode::not_found ? kNotFound : kFailure,
                   st.status().code() == StatusCode::not_found
                       ? fmt::format("no cache at {} (the directory does not exist; use --dir or SNAPCACHE_DIR)",
                                     c.directory)
                       : st.status().message());
  if (!st->is_directory) throw CliError(kFailure, c.directory + " is not a directory");
  // A cache switched off for loads can still be inspected and cleaned.
  c.mode = CacheMode::enabled;
  auto opened = Store::open(std::move(c), fs);
  if (!opened) throw CliError(kFailure, opened.status().message());
  store_ = std::move(*opened);
  return *store_;
}

Store& Context::store_creating() {
  if (store_) return *store_;
  Config c = config();
  c.mode = CacheMode::enabled;
  auto opened = Store::open(std::move(c), posix_file_system());
  if (!opened) throw CliError(kFailure, opened.status().message());
  store_ = std::move(*opened);
  return *store_;
}

std::vector<EntryInfo> entries_or_fail(Store& store) {
  auto entries = list_entries(store);
  if (!entries) throw CliError(kFailure, entries.status().message());
  return std::move(*entries);
}

std::vector<EntryInfo> published_entries(Store& store) {
  std::vector<EntryInfo> out;
  for (auto& e : entries_or_fail(store))
    if (e.state != EntryState::unfinished) out.push_back(std::move(e));
  return out;
}

bool is_hex(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string resolve_entry(Store& store, const std::string& text) {
  if (!is_hex(text))
    throw CliError(kUsage, fmt::format("'{}' is not an entry id (lowercase hex digits, as `snapcache ls` shows)", text));
  std::vector<EntryInfo> matches;
  for (auto& e : published_entries(store))
    if (e.id.starts_with(text)) matches.push_back(std::move(e));
  if (matches.empty()) throw CliError(kNotFound, fmt::format("no entry matches '{}'", text));
  if (matches.size() > 1) {
    std::vector<std::string> list;
    for (const auto& e : matches) list.push_back(fmt::format("{}  {}", e.id, describe_entry(e)));
    throw CliError(kNotFound, fmt::format("'{}' is ambiguous; it matches {} entries:", text, matches.size()),
                   std::move(list));
  }
  return matches.front().id;
}

}  // namespace snapcache::cli
