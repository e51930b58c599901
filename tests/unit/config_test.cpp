#include <cstdlib>

#include "snapcache/config.h"
#include "support/catch.h"
#include "support/env_guard.h"
#include "support/temp_dir.h"

using namespace snapcache;


TEST_CASE("config defaults", "[config]") {
  test::TempDir home;  // no settings file in it
  test::EnvGuard env({{"HOME", home.path().c_str()}});
  auto c = Config::from_environment();
  REQUIRE(c.is_ok());
  CHECK(c->config_file.empty());
  CHECK(Config::default_directory() == home.path() + "/.cache/snapcache");
  CHECK(c->enabled());
  CHECK(c->capacity_bytes == 128 * kGiB);
  CHECK(c->reserve_free_bytes == 1 * kGiB);
  CHECK(c->directory == Config::default_directory());
  CHECK(c->sources["capacity"] == ConfigSource::default_value);
}

TEST_CASE("config takes environment overrides and says so", "[config]") {
  test::TempDir home;
  test::EnvGuard env({{"HOME", home.path().c_str()}, {"SNAPCACHE_DIR", "/var/cache/snap"}, {"SNAPCACHE_DISABLE", "1"},
                {"SNAPCACHE_CAPACITY_GIB", "2.5"}, {"SNAPCACHE_RESERVE_GIB", "0"}});
  auto c = Config::from_environment();
  REQUIRE(c.is_ok());
  CHECK(c->directory == "/var/cache/snap");
  CHECK_FALSE(c->enabled());
  CHECK(c->capacity_bytes == 5 * kGiB / 2);
  CHECK(c->reserve_free_bytes == 0);
  CHECK(c->sources["directory"] == ConfigSource::environment);
  CHECK(c->sources["mode"] == ConfigSource::environment);
}

TEST_CASE("invalid config values are rejected with a message naming them", "[config]") {
  std::vector<std::pair<const char*, const char*>> bad = {
      {"SNAPCACHE_CAPACITY_GIB", "lots"}, {"SNAPCACHE_CAPACITY_GIB", "-3"}, {"SNAPCACHE_RESERVE_GIB", "1GiB"},
      {"SNAPCACHE_DISABLE", "maybe"}, {"SNAPCACHE_DIR", "relative/path"}};
  for (auto [name, value] : bad) {
    test::TempDir home;
    test::EnvGuard env({{"HOME", home.path().c_str()}, {name, value}});
    auto c = Config::from_environment();
    INFO(name << "=" << value);
    REQUIRE_FALSE(c.is_ok());
    CHECK(c.status().code() == StatusCode::invalid_argument);
    CHECK(c.status().message().find(name) != std::string::npos);
    CHECK(c.status().message().find(value) != std::string::npos);
  }
}
