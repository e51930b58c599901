#include "cli.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>

#include <fmt/format.h>

#include "render.h"
#include "snapcache/extend/file_system.h"

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
  if (c.directory.empty()) throw CliError(kFailure, Config::missing_directory().message());
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

namespace {

// Edits from a to b, an adjacent swap counting as one (optimal string alignment distance).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> nearest_name(const std::string& word, const std::vector<std::string>& names) {
  // Anything longer is no typo of a command name, and would cost a large table for nothing.
  if (word.size() > 64) return std::nullopt;
  std::string lower = word;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const auto& name : names) {
    const std::size_t distance = edit_distance(lower, name);
    if (distance > std::max<std::size_t>(1, name.size() / 3)) continue;
    if (!best || distance < best_distance) best = name, best_distance = distance;
  }
  return best;
}

std::string resolve_entry(Store& store, const std::string& text) {
  if (!is_hex(text))
    throw CliError(kUsage, fmt::format("'{}' is not an entry id (lowercase hex digits, as `snapcache ls` shows)", text));
  // A whole id is looked up alone; a prefix is matched against the names alone, then the matches
  // are read: reading every entry took minutes in a cache of a million.
  if (text.size() == 32) {
    auto info = entry_info(store, text);
    if (info) return text;
    if (info.status().code() != StatusCode::not_found) throw CliError(kFailure, info.status().message());
    throw CliError(kNotFound, fmt::format("no entry matches '{}'", text));
  }
  auto ids = entry_ids(store);
  if (!ids) throw CliError(kFailure, ids.status().message());
  std::vector<std::string> matches;
  for (auto& id : *ids)
    if (id.starts_with(text)) matches.push_back(std::move(id));
  if (matches.empty()) throw CliError(kNotFound, fmt::format("no entry matches '{}'", text));
  if (matches.size() > 1) {
    std::vector<std::string> list;
    for (const auto& id : matches) {
      auto e = entry_info(store, id);
      list.push_back(e ? fmt::format("{}  {}", id, describe_entry(*e)) : id);
    }
    throw CliError(kNotFound, fmt::format("'{}' is ambiguous; it matches {} entries:", text, matches.size()),
                   std::move(list));
  }
  return matches.front();
}

}  // namespace snapcache::cli
