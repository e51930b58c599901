// What the library gained for the command: settings files, counters, recorded misses, key files,
// eviction on request and garbage collection with a grace period.
#include <cstdlib>

#include "cli_fixtures.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "support/env_guard.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"

using namespace snapcache;
using namespace snapcache::test;


TEST_CASE("a settings file sits between the defaults and the environment", "[cli][library]") {
  EnvGuard env;
  TempDir dir;
  env.set("XDG_CONFIG_HOME", dir.path().c_str());
  CHECK(Config::default_config_file() == dir.path() + "/snapcache/snapcache.conf");
  {
    auto c = Config::from_environment();  // no file: as before
    REQUIRE(c.is_ok());
    CHECK(c->config_file.empty());
    CHECK(c->sources["capacity"] == ConfigSource::default_value);
  }
  REQUIRE(make_directories(*posix_file_system(), dir.path() + "/snapcache").is_ok());
  write_bytes(Config::default_config_file(),
              "directory = /srv/cache\ndisable = no\ncapacity = 500GB\nreserve = 2GiB\n");
  env.set("SNAPCACHE_RESERVE_GIB", "1");
  auto c = Config::from_environment();
  REQUIRE(c.is_ok());
  CHECK(c->config_file == Config::default_config_file());
  CHECK(c->directory == "/srv/cache");
  CHECK(c->sources["directory"] == ConfigSource::file);
  CHECK(c->capacity_bytes == 500'000'000'000ull);
  CHECK(c->sources["capacity"] == ConfigSource::file);
  CHECK(c->reserve_free_bytes == kGiB);
  CHECK(c->sources["reserve"] == ConfigSource::environment);

  for (const char* bad : {"directory = relative\n", "capacity = lots\n", "disable = maybe\n", "no equals sign\n",
                          "colour = blue\n"}) {
    write_bytes(Config::default_config_file(), bad);
    auto r = Config::from_environment();
    INFO(bad);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == StatusCode::invalid_argument);
    CHECK(r.status().message().find(":1:") != std::string::npos);
  }
  env.set("SNAPCACHE_CONFIG", (dir / "missing.conf").c_str());
  CHECK_FALSE(Config::from_environment().is_ok());
}

TEST_CASE("counters never make a load or a publication fail", "[cli][library]") {
  Cache cache;
  // stats.json cannot be written (it is a directory); the misses directory is a file.
  REQUIRE(make_directories(cache.store->fs(), cache.path() + "/stats.json").is_ok());
  write_bytes(cache.path() + "/misses", "in the way");
  CHECK(cache.store->lookup(store_key(61)).result == LookupResult::miss);
  cache.publish(61);
  CHECK(cache.store->lookup(store_key(61)).result == LookupResult::hit);
  CHECK(recorded_misses(*cache.store).empty());
}

TEST_CASE("counters add up across processes and a torn file reads as zero", "[cli][library]") {
  Cache cache;
  cache.publish(62);
  REQUIRE(run_helper(kStoreHelper, {"load", cache.path(), "62"}) == 0);
  REQUIRE(run_helper(kStoreHelper, {"load", cache.path(), "62"}) == 0);
  CHECK(cache.store->lookup(store_key(62)).result == LookupResult::hit);
  auto c = read_counters(*cache.store);
  REQUIRE(c.is_ok());
  CHECK(c->hits == 3);
  CHECK(c->published == 1);
  write_bytes(cache.path() + "/stats.json", "{\"hits\": 4");
  CHECK(read_counters(*cache.store)->hits == 0);
  CHECK(cache.store->lookup(store_key(62)).result == LookupResult::hit);
  CHECK(read_counters(*cache.store)->hits == 1);
}

TEST_CASE("only the newest missed keys are kept", "[cli][library]") {
  Cache cache;
  for (int seed = 100; seed < 170; ++seed) cache.store->lookup(store_key(seed));
  auto misses = recorded_misses(*cache.store);
  CHECK(misses.size() == 64);
  auto key = read_key_file(cache.store->fs(), misses.front().path);
  REQUIRE(key.is_ok());
  CHECK(key_id(*key) == misses.front().id);
}
