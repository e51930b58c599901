#include "snapcache/config.h"

#include "util/fmt.h"
#include "util/file_io.h"

#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

#include "format/public_key.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/text.h"

namespace snapcache {
namespace {

// Every setting's names, once: the name `sources` and origin() use (what `snapcache config` shows),
// its name in the settings file, and its environment variable.
struct SettingNames {
  const char* setting;
  const char* in_file;
  const char* variable;
};
constexpr SettingNames kSettings[] = {
    {"directory", "directory", "SNAPCACHE_DIR"},
    {"mode", "disable", "SNAPCACHE_DISABLE"},
    {"capacity", "capacity", "SNAPCACHE_CAPACITY_GIB"},
    {"reserve", "reserve", "SNAPCACHE_RESERVE_GIB"},
    {"secondary", "secondary", "SNAPCACHE_SECONDARY_DIR"},
    {"trusted_archive_keys", "trusted_archive_keys", "SNAPCACHE_TRUSTED_ARCHIVE_KEYS"},
};

}  // namespace

const char* to_string(ConfigSource source) {
  switch (source) {
    case ConfigSource::default_value: return "default";
    case ConfigSource::environment: return "environment";
    case ConfigSource::file: return "file";
    case ConfigSource::flag: return "flag";
  }
  return "?";
}

std::string Config::origin(const std::string& setting) const {
  auto it = sources.find(setting);
  switch (it == sources.end() ? ConfigSource::default_value : it->second) {
    case ConfigSource::default_value: return "";
    case ConfigSource::file: return config_file;
    case ConfigSource::flag: {
      auto flag = flags.find(setting);
      return flag != flags.end() && !flag->second.empty() ? flag->second : "the caller";
    }
    case ConfigSource::environment:
      for (const SettingNames& s : kSettings)
        if (setting == s.setting) return s.variable;
      return "the environment";
  }
  return "";
}

namespace {

// A variable that names a place: only an absolute path does (the XDG rule, applied to HOME too: a
// relative one would put the cache, or read its settings, wherever the process happens to run).
std::optional<std::string> place_from(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value != '/') return std::nullopt;
  return std::string(value);
}

// What is wrong with `variable` as a place, in words: "HOME is not set", "HOME='x' is not an
// absolute path".
std::string why_not_a_place(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return fmt::format("{} is not set", variable);
  if (*value == '\0') return fmt::format("{} is empty", variable);
  return fmt::format("{}='{}' is not an absolute path", variable, value);
}

}  // namespace

std::string Config::default_directory() {
  if (auto xdg = place_from("XDG_CACHE_HOME")) return *xdg + "/snapcache";
  if (auto home = place_from("HOME")) return *home + "/.cache/snapcache";
  return "";
}

Status Config::missing_directory() {
  // XDG_CACHE_HOME is named only when it was given: most environments never set it.
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string xdg_too = xdg != nullptr && *xdg != '\0' ? " and " + why_not_a_place("XDG_CACHE_HOME") : "";
  return Status(StatusCode::invalid_argument,
                fmt::format("no cache directory: {}{}, so there is no ~/.cache/snapcache (snapcache never falls back "
                            "to a shared directory such as /tmp); set SNAPCACHE_DIR to an absolute path (or "
                            "XDG_CACHE_HOME, or `directory` in a settings file)",
                            why_not_a_place("HOME"), xdg_too));
}

std::string Config::default_config_file() {
  if (auto xdg = place_from("XDG_CONFIG_HOME")) return *xdg + "/snapcache/snapcache.conf";
  if (auto home = place_from("HOME")) return *home + "/.config/snapcache/snapcache.conf";
  return "";
}

namespace {

// The variable's name carries the unit, so its value is a plain number of GiB (parse_gib).
Result<std::uint64_t> gib_from_environment(const char* variable, std::string_view value) {
  auto bytes = parse_gib(value);
  if (!bytes) return Status(StatusCode::invalid_argument, fmt::format("{}: {}", variable, bytes.status().message()));
  return bytes;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::optional<bool> parse_bool(std::string_view s) {
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  return std::nullopt;
}

// Public keys separated by commas or white space, each checked and kept as its canonical text
// (format/public_key.h), so a key compares equal however its hex digits were written.
Result<std::vector<std::string>> parse_key_list(std::string_view text) {
  std::vector<std::string> keys;
  while (!text.empty()) {
    const std::size_t start = text.find_first_not_of(", \t");
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const std::size_t end = text.find_first_of(", \t");
    auto key = format::parse_public_key(text.substr(0, end));
    if (!key) return key.status();
    keys.push_back(format::public_key_text(*key));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end);
  }
  return keys;
}

std::string settings_in_file() {
  std::string names;
  for (const SettingNames& s : kSettings) names += std::string(names.empty() ? "" : ", ") + s.in_file;
  return names;
}

// `name = value` lines, `#` comments. Errors name the file and line, so a person can fix them.
Status apply_file(Config& c, const std::string& path) {
  auto fs = posix_file_system();
  // A settings file is a few lines; the user's file may be a link (dotfile managers make them).
  constexpr std::uint64_t kMaxSettingsBytes = 1u << 20;
  auto text = read_file(*fs, path, kMaxSettingsBytes, Follow::yes);
  if (!text) return text.status().with_context("settings file");
  std::string_view rest = *text;
  // Some editors start a UTF-8 file with a byte-order mark: it is no part of the first name. A
  // UTF-16 file would read as one line of NUL-ridden bytes; say what it is instead.
  if (rest.starts_with("\xef\xbb\xbf")) rest.remove_prefix(3);
  else if (rest.starts_with("\xff\xfe") || rest.starts_with("\xfe\xff"))
    return Status(StatusCode::invalid_argument,
                  fmt::format("{} is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8", path));
  for (int line_no = 1; !rest.empty(); ++line_no) {
    std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    auto where = [&] { return fmt::format("{}:{}", path, line_no); };
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos)
      return Status(StatusCode::invalid_argument, fmt::format("{}: expected 'name = value', got '{}'", where(), line));
    std::string name(trim(line.substr(0, eq)));
    std::string value(trim(line.substr(eq + 1)));
    if (name == "directory") {
      if (value.empty() || value[0] != '/')
        return Status(StatusCode::invalid_argument,
                      fmt::format("{}: directory '{}' must be an absolute path", where(), value));
      c.directory = value;
      c.sources["directory"] = ConfigSource::file;
    } else if (name == "secondary") {
      if (!value.empty() && value[0] != '/')
        return Status(StatusCode::invalid_argument,
                      fmt::format("{}: secondary '{}' must be an absolute path", where(), value));
      c.secondary_directory = value;
      c.sources["secondary"] = ConfigSource::file;
    } else if (name == "disable") {
      auto b = parse_bool(value);
      if (!b)
        return Status(StatusCode::invalid_argument,
                      fmt::format("{}: disable '{}' is not one of true, false, yes, no, on, off, 1, 0", where(), value));
      c.mode = *b ? CacheMode::disabled : CacheMode::enabled;
      c.sources["mode"] = ConfigSource::file;
    } else if (name == "capacity" || name == "reserve") {
      auto bytes = parse_size(value);
      if (!bytes) return Status(StatusCode::invalid_argument, fmt::format("{}: {}: {}", where(), name, bytes.status().message()));
      (name == "capacity" ? c.capacity_bytes : c.reserve_free_bytes) = *bytes;
      c.sources[name] = ConfigSource::file;
    } else if (name == "trusted_archive_keys") {
      auto keys = parse_key_list(value);
      if (!keys) return Status(StatusCode::invalid_argument, fmt::format("{}: {}: {}", where(), name, keys.status().message()));
      c.trusted_archive_keys = std::move(*keys);
      c.sources[name] = ConfigSource::file;
    } else {
      return Status(StatusCode::invalid_argument,
                    fmt::format("{}: unknown setting '{}' (known: {})", where(), name, settings_in_file()));
    }
  }
  c.config_file = path;
  return Status::ok();
}

}  // namespace

Result<Config> Config::from_environment() { return load(""); }

Result<Config> Config::load(const std::string& config_file) {
  Config c;
  c.directory = default_directory();
  for (const SettingNames& s : kSettings) c.sources[s.setting] = ConfigSource::default_value;

  std::string file = config_file;
  if (const char* v = std::getenv("SNAPCACHE_CONFIG"); file.empty() && v != nullptr && *v != '\0') file = v;
  if (file.empty()) {
    // The default file is optional; one named explicitly must exist.
    std::string fallback = default_config_file();
    if (!fallback.empty() && posix_file_system()->stat(fallback)) file = fallback;
  }
  if (!file.empty()) SNAPCACHE_RETURN_IF_ERROR(apply_file(c, file));

  if (const char* dir = std::getenv("SNAPCACHE_DIR"); dir != nullptr && *dir != '\0') {
    if (dir[0] != '/')
      return Status(StatusCode::invalid_argument,
                    fmt::format("SNAPCACHE_DIR='{}' must be an absolute path", dir));
    c.directory = dir;
    c.sources["directory"] = ConfigSource::environment;
  }
  if (const char* v = std::getenv("SNAPCACHE_SECONDARY_DIR"); v != nullptr) {
    if (*v != '\0' && *v != '/')
      return Status(StatusCode::invalid_argument,
                    fmt::format("SNAPCACHE_SECONDARY_DIR='{}' must be an absolute path", v));
    c.secondary_directory = v;
    while (c.secondary_directory.size() > 1 && c.secondary_directory.back() == '/') c.secondary_directory.pop_back();
    c.sources["secondary"] = ConfigSource::environment;
  }
  if (const char* v = std::getenv("SNAPCACHE_TRUSTED_ARCHIVE_KEYS"); v != nullptr) {
    auto keys = parse_key_list(v);
    if (!keys)
      return Status(StatusCode::invalid_argument, fmt::format("SNAPCACHE_TRUSTED_ARCHIVE_KEYS: {}", keys.status().message()));
    c.trusted_archive_keys = std::move(*keys);
    c.sources["trusted_archive_keys"] = ConfigSource::environment;
  }
  if (const char* v = std::getenv("SNAPCACHE_DISABLE"); v != nullptr && *v != '\0') {
    auto disable = parse_bool(v);
    if (!disable)
      return Status(StatusCode::invalid_argument,
                    fmt::format("SNAPCACHE_DISABLE='{}' is not one of 1, 0, true, false, yes, no, on, off", v));
    c.mode = *disable ? CacheMode::disabled : CacheMode::enabled;
    c.sources["mode"] = ConfigSource::environment;
  }
  if (const char* v = std::getenv("SNAPCACHE_CAPACITY_GIB"); v != nullptr) {
    auto bytes = gib_from_environment("SNAPCACHE_CAPACITY_GIB", v);
    if (!bytes) return bytes.status();
    c.capacity_bytes = *bytes;
    c.sources["capacity"] = ConfigSource::environment;
  }
  if (const char* v = std::getenv("SNAPCACHE_RESERVE_GIB"); v != nullptr) {
    auto bytes = gib_from_environment("SNAPCACHE_RESERVE_GIB", v);
    if (!bytes) return bytes.status();
    c.reserve_free_bytes = *bytes;
    c.sources["reserve"] = ConfigSource::environment;
  }
  return c;
}

}  // namespace snapcache
