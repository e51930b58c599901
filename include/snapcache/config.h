// The cache's settings: defaults, overridden by environment variables, overridden by the caller.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "snapcache/status.h"

namespace snapcache {

inline constexpr std::uint64_t kGiB = 1ull << 30;

enum class CacheMode { enabled, disabled };
enum class ConfigSource { default_value, environment, file, flag };
const char* to_string(ConfigSource source);

struct Config {
  CacheMode mode = CacheMode::enabled;
  std::string directory;                        // default: $XDG_CACHE_HOME/snapcache or ~/.cache/snapcache
  std::uint64_t capacity_bytes = 128 * kGiB;    // total size of all entries
  std::uint64_t reserve_free_bytes = 1 * kGiB;  // free disk a publication must leave
  // Where each setting came from ("directory", "mode", "capacity", "reserve").
  std::map<std::string, ConfigSource> sources;

  bool enabled() const { return mode == CacheMode::enabled; }

  // Defaults, then SNAPCACHE_DIR, SNAPCACHE_DISABLE (1/true/yes), SNAPCACHE_CAPACITY_GIB,
  // SNAPCACHE_RESERVE_GIB. An invalid value is an error that names the variable and the value.
  static Result<Config> from_environment();
  static std::string default_directory();
};

}  // namespace snapcache
