#include "support/env_guard.h"

#include <cstdlib>

namespace snapcache::test {

const std::vector<std::string>& EnvGuard::isolated_names() {
  static const std::vector<std::string> names = {
      "SNAPCACHE_CONFIG",      "SNAPCACHE_DIR",   "SNAPCACHE_DISABLE", "SNAPCACHE_CAPACITY_GIB",
      "SNAPCACHE_RESERVE_GIB", "XDG_CONFIG_HOME", "XDG_CACHE_HOME",    "HOME"};
  return names;
}

EnvGuard::EnvGuard(std::initializer_list<std::pair<const char*, const char*>> vars) {
  for (const auto& name : isolated_names()) {
    const char* value = std::getenv(name.c_str());
    saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
    ::unsetenv(name.c_str());
  }
  for (const auto& [name, value] : vars) set(name, value);
}

EnvGuard::~EnvGuard() {
  for (const auto& [name, value] : saved_) {
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
}

void EnvGuard::set(const std::string& name, const std::string& value) { ::setenv(name.c_str(), value.c_str(), 1); }

}  // namespace snapcache::test
