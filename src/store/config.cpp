#include "snapcache/config.h"

#include "util/fmt.h"

#include <cmath>
#include <cstdlib>
#include <string_view>

namespace snapcache {

const char* to_string(ConfigSource source) {
  switch (source) {
    case ConfigSource::default_value: return "default";
    case ConfigSource::environment: return "environment";
    case ConfigSource::file: return "file";
    case ConfigSource::flag: return "flag";
  }
  return "?";
}

std::string Config::default_directory() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/')
    return std::string(xdg) + "/snapcache";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::string(home) + "/.cache/snapcache";
  return "/tmp/snapcache";
}

namespace {

Result<std::uint64_t> parse_gib(const char* variable, std::string_view value) {
  std::string text(value);
  char* end = nullptr;
  double gib = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(gib) || gib < 0 || gib > 1e9)
    return Status(StatusCode::invalid_argument,
                  fmt::format("{}='{}' is not a non-negative number of GiB", variable, value));
  return static_cast<std::uint64_t>(std::llround(gib * static_cast<double>(kGiB)));
}

}  // namespace

Result<Config> Config::from_environment() {
  Config c;
  c.directory = default_directory();
  for (const char* name : {"directory", "mode", "capacity", "reserve"}) c.sources[name] = ConfigSource::default_value;

  if (const char* dir = std::getenv("SNAPCACHE_DIR"); dir != nullptr && *dir != '\0') {
    if (dir[0] != '/')
      return Status(StatusCode::invalid_argument,
                    fmt::format("SNAPCACHE_DIR='{}' must be an absolute path", dir));
    c.directory = dir;
    c.sources["directory"] = ConfigSource::environment;
  }
  if (const char* v = std::getenv("SNAPCACHE_DISABLE"); v != nullptr && *v != '\0') {
    std::string_view s(v);
    if (s == "1" || s == "true" || s == "yes" || s == "on") c.mode = CacheMode::disabled;
    else if (s == "0" || s == "false" || s == "no" || s == "off") c.mode = CacheMode::enabled;
    else
      return Status(StatusCode::invalid_argument,
                    fmt::format("SNAPCACHE_DISABLE='{}' is not one of 1, 0, true, false, yes, no, on, off", s));
    c.sources["mode"] = ConfigSource::environment;
  }
  if (const char* v = std::getenv("SNAPCACHE_CAPACITY_GIB"); v != nullptr) {
    auto bytes = parse_gib("SNAPCACHE_CAPACITY_GIB", v);
    if (!bytes) return bytes.status();
    c.capacity_bytes = *bytes;
    c.sources["capacity"] = ConfigSource::environment;
  }
  if (const char* v = std::getenv("SNAPCACHE_RESERVE_GIB"); v != nullptr) {
    auto bytes = parse_gib("SNAPCACHE_RESERVE_GIB", v);
    if (!bytes) return bytes.status();
    c.reserve_free_bytes = *bytes;
    c.sources["reserve"] = ConfigSource::environment;
  }
  return c;
}

}  // namespace snapcache
