// The cache's settings: defaults, overridden by a settings file, overridden by environment
// variables, overridden by the caller.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "snapcache/status.h"
#include "snapcache/export.h"

namespace snapcache {

inline constexpr std::uint64_t kGiB = 1ull << 30;

enum class CacheMode { enabled, disabled };
enum class ConfigSource { default_value, environment, file, flag };
SNAPCACHE_API const char* to_string(ConfigSource source);

struct SNAPCACHE_API Config {
  CacheMode mode = CacheMode::enabled;
  std::string directory;                        // default: default_directory()
  std::uint64_t capacity_bytes = 128 * kGiB;    // total size of all entries
  std::uint64_t reserve_free_bytes = 1 * kGiB;  // free disk a publication must leave
  // A read-only store searched after a local miss (a network file system the fleet shares, say):
  // an entry found there is copied into this cache, every chunk proven, then served from here.
  // Empty: none. Never written, locked or repaired (docs/scale-out.md).
  std::string secondary_directory;
  // The public keys whose signatures prove who made an archive ("ed25519:" and 64 hex digits, as
  // `snapcache keygen` prints them): `snapcache import` takes an archive signed by one of them,
  // and refuses any other unless told to trust it (docs/scale-out.md). Empty: none.
  std::vector<std::string> trusted_archive_keys;
  // Where each setting came from ("directory", "mode", "capacity", "reserve", "secondary",
  // "trusted_archive_keys").
  std::map<std::string, ConfigSource> sources;
  // The flag a caller set a setting from (ConfigSource::flag), "--capacity-gib": messages about
  // the setting name it, since that is what the user would change.
  std::map<std::string, std::string> flags;
  std::string config_file;  // the settings file that was read; empty when none was

  bool enabled() const { return mode == CacheMode::enabled; }
  // What set `setting`, as the user would change it: "SNAPCACHE_CAPACITY_GIB", the settings
  // file's path, the caller's flag ("--capacity-gib", else "the caller"); empty for a default.
  std::string origin(const std::string& setting) const;

  // Defaults, then the settings file (see load), then SNAPCACHE_DIR, SNAPCACHE_DISABLE
  // (1/true/yes), SNAPCACHE_CAPACITY_GIB, SNAPCACHE_RESERVE_GIB (a number of GiB, see parse_gib),
  // SNAPCACHE_SECONDARY_DIR (an absolute path; empty: none), SNAPCACHE_TRUSTED_ARCHIVE_KEYS (keys
  // separated by commas or spaces; empty: none).
  // An invalid value is an error that names the variable (or file and line) and the value.
  static Result<Config> from_environment();
  // The same, reading `config_file` if it is not empty, else $SNAPCACHE_CONFIG if set (both must
  // exist), else default_config_file() if it exists. The file is UTF-8 (a leading byte-order mark
  // is skipped) with `name = value` lines and `#` comments; names: directory, disable, capacity,
  // reserve, secondary, trusted_archive_keys (sizes with units: 64GiB, 500GB; a bare number other
  // than 0 is an error, see parse_size).
  static Result<Config> load(const std::string& config_file);
  // $XDG_CACHE_HOME/snapcache, else $HOME/.cache/snapcache, each variable only when it is an
  // absolute path (the XDG rule: a relative one is ignored). Empty when neither is: with no home
  // there is no default cache, never a shared path such as /tmp/snapcache, which another user
  // could make first, nor one relative to the working directory. A store with no directory is
  // refused with missing_directory(), so a loader's is unavailable and loads fall back, saying so.
  static std::string default_directory();
  // Why default_directory() is empty and what to set: "no cache directory: HOME is not set, so
  // there is no ~/.cache/snapcache; set SNAPCACHE_DIR to an absolute path (or XDG_CACHE_HOME, or
  // `directory` in a settings file)". invalid_argument.
  static Status missing_directory();
  // $XDG_CONFIG_HOME/snapcache/snapcache.conf, else ~/.config/snapcache/snapcache.conf, by the same
  // rule; empty with no home.
  static std::string default_config_file();
};

}  // namespace snapcache
