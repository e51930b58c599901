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
      {"SNAPCACHE_CAPACITY_GIB", "0x10"}, {"SNAPCACHE_CAPACITY_GIB", "1e-300"}, {"SNAPCACHE_CAPACITY_GIB", "inf"},
      {"SNAPCACHE_CAPACITY_GIB", "nan"}, {"SNAPCACHE_CAPACITY_GIB", "20000000000"},
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

TEST_CASE("a settings file takes sizes with units only, and says so", "[config]") {
  test::TempDir home;
  test::EnvGuard env({{"HOME", home.path().c_str()}});
  const std::string file = home / "snapcache.conf";
  for (const char* line : {"capacity = 500\n", "reserve = 15000PB\n", "capacity = 0x10\n", "capacity = 1e-300\n"}) {
    INFO(line);
    test::write_bytes(file, line);
    auto c = Config::load(file);
    REQUIRE_FALSE(c.is_ok());
    CHECK(c.status().code() == StatusCode::invalid_argument);
    CHECK(c.status().message().find(file + ":1") != std::string::npos);
  }
  test::write_bytes(file, "capacity = 500\n");
  CHECK(Config::load(file).status().message().find("has no unit") != std::string::npos);
  test::write_bytes(file, "capacity = 0\nreserve = 500GiB\n");
  auto ok = Config::load(file);
  REQUIRE(ok.is_ok());
  CHECK(ok->capacity_bytes == 0);
  CHECK(ok->reserve_free_bytes == 500 * kGiB);
}

TEST_CASE("a setting's origin is what the user would change", "[config]") {
  test::TempDir home;
  test::EnvGuard env({{"HOME", home.path().c_str()}, {"SNAPCACHE_CAPACITY_GIB", "3"}});
  auto c = Config::from_environment();
  REQUIRE(c.is_ok());
  CHECK(c->origin("capacity") == "SNAPCACHE_CAPACITY_GIB");
  CHECK(c->origin("reserve").empty());
  c->sources["capacity"] = ConfigSource::flag;
  CHECK(c->origin("capacity") == "the caller");
  c->flags["capacity"] = "--capacity-gib";
  CHECK(c->origin("capacity") == "--capacity-gib");
}
