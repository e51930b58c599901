// The environment a test runs in, isolated: every variable that can change a Config is cleared
// for the guard's scope (then `vars` are set), and the old values come back at its end.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace snapcache::test {

class EnvGuard {
 public:
  // SNAPCACHE_CONFIG, SNAPCACHE_DIR, SNAPCACHE_DISABLE, SNAPCACHE_CAPACITY_GIB,
  // SNAPCACHE_RESERVE_GIB, XDG_CONFIG_HOME, XDG_CACHE_HOME, HOME.
  static const std::vector<std::string>& isolated_names();

  explicit EnvGuard(std::initializer_list<std::pair<const char*, const char*>> vars = {});
  ~EnvGuard();
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

  void set(const std::string& name, const std::string& value);

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace snapcache::test
