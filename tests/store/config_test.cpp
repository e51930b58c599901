#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "snapcache/config.h"
#include "snapcache/printable.h"
#include "support/catch.h"
#include "support/child_process.h"
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

namespace {

// What the store helper said of the store a loader opens in `env` ("directory" -> "...", ...): a
// process of its own, started in a working directory of its own. A HOME that is a relative path
// finds a settings file there (naming a directory), which must not be read; and nothing may be
// made there.
std::map<std::string, std::string> default_store_in(const std::vector<std::pair<std::string, std::string>>& env) {
  test::TempDir work;
  test::EnvGuard guard;  // HOME, XDG_*, SNAPCACHE_* unset, then `env`
  std::string relative_home;
  for (const auto& [name, value] : env) {
    guard.set(name, value);
    if (name == "HOME" && !value.empty() && value[0] != '/') relative_home = value;
  }
  if (!relative_home.empty()) {
    std::string dir = work.path();
    for (const std::string& part : {relative_home, std::string(".config"), std::string("snapcache")})
      REQUIRE(::mkdir((dir += "/" + part).c_str(), 0700) == 0);
    test::write_bytes(dir + "/snapcache.conf", "directory = " + (work / "planted") + "\n");
  }
  test::ChildProcess helper(test::kStoreHelper, {"default-store", work.path()});
  std::map<std::string, std::string> said;
  while (helper.wait_for_line("")) {
    const std::string& line = helper.last_line();
    const auto space = line.find(' ');
    said[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
  }
  said["exit"] = std::to_string(helper.wait());
  struct stat st {};
  const bool made = ::stat((work / "planted").c_str(), &st) == 0 ||
                    (!relative_home.empty() && ::stat((work / (relative_home + "/.cache")).c_str(), &st) == 0);
  said["made_here"] = made ? "yes" : "";
  return said;
}

}  // namespace

// With no usable home there is no default cache: never /tmp/snapcache (a path any user can make
// first, and so own), never a path relative to wherever the process runs. A loader's store is
// unavailable with the reason and what to set; SNAPCACHE_DIR or XDG_CACHE_HOME still name one.
TEST_CASE("without a usable HOME there is no default cache, and the store says what to set", "[config]") {
  struct NoHome {
    std::optional<std::string> home;  // nullopt: unset
    std::string says;
  };
  const NoHome c = GENERATE(values<NoHome>({
      {std::nullopt, "HOME is not set"},
      {std::string(), "HOME is empty"},
      {std::string("home"), "HOME='home' is not an absolute path"},
  }));
  INFO("HOME " << (c.home ? "'" + *c.home + "'" : "unset"));
  std::vector<std::pair<std::string, std::string>> env;
  if (c.home) env.emplace_back("HOME", *c.home);

  auto said = default_store_in(env);
  INFO(said["unavailable"]);
  CHECK(said["exit"] == "0");
  CHECK(said["default"].empty());
  CHECK(said["directory"].empty());
  CHECK(said["config_file"].empty());
  CHECK(said["made_here"].empty());
  CHECK(said["unavailable"].find("no cache directory: " + c.says) != std::string::npos);
  CHECK(said["unavailable"].find("set SNAPCACHE_DIR to an absolute path") != std::string::npos);
  CHECK(said["lookup"].find("fallback") == 0);
  CHECK(said["lookup"].find("set SNAPCACHE_DIR") != std::string::npos);

  // A relative XDG_CACHE_HOME is no more a place than a relative HOME (the XDG rule: ignored).
  env.emplace_back("XDG_CACHE_HOME", "cache");
  said = default_store_in(env);
  CHECK(said["directory"].empty());
  CHECK(said["unavailable"].find("XDG_CACHE_HOME='cache' is not an absolute path") != std::string::npos);

  // Either variable, absolute, names the cache, and loads use it.
  test::TempDir place;
  for (const auto& [name, value, directory] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"SNAPCACHE_DIR", place / "dir", place / "dir"},
                                                                      {"XDG_CACHE_HOME", place.path(), place / "snapcache"}}) {
    INFO(name);
    auto named = env;
    named.emplace_back(name, value);
    said = default_store_in(named);
    CHECK(said["directory"] == directory);
    CHECK(said["unavailable"].empty());
    CHECK(said["lookup"].find("miss") == 0);
  }
}

TEST_CASE("a settings file may start with a UTF-8 byte-order mark, and one elsewhere is shown", "[config]") {
  test::TempDir home;
  test::EnvGuard env({{"HOME", home.path().c_str()}});
  const std::string file = home / "snapcache.conf";
  // What an editor that writes a byte-order mark saves.
  test::write_bytes(file, "\xef\xbb\xbf" "capacity = 10GiB\r\nreserve = 2GiB\r\n");
  auto c = Config::load(file);
  INFO(printable(c.status().message()));
  REQUIRE(c.is_ok());
  CHECK(c->capacity_bytes == 10 * kGiB);
  CHECK(c->reserve_free_bytes == 2 * kGiB);
  CHECK(c->sources["capacity"] == ConfigSource::file);

  // The same character inside the file is no byte-order mark: the name holding it is unknown, and
  // the mark shows when the message is printed.
  test::write_bytes(file, "capacity = 10GiB\n\xef\xbb\xbfreserve = 2GiB\n");
  auto inside = Config::load(file);
  REQUIRE_FALSE(inside.is_ok());
  CHECK(printable(inside.status().message()).find(file + ":2: unknown setting '\\ufeffreserve'") != std::string::npos);

  // A file saved as UTF-16 is named as such, not read as a line of garbage.
  test::write_bytes(file, std::string("\xff\xfe" "c\0a\0p\0", 8));
  auto wide = Config::load(file);
  REQUIRE_FALSE(wide.is_ok());
  CHECK(wide.status().code() == StatusCode::invalid_argument);
  CHECK(wide.status().message().find(file + " is UTF-16") != std::string::npos);
}
