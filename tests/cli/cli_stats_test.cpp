// snapcache stats: sizes, entries by state, and the counters the library keeps.
#include <cerrno>
#include <cmath>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"
#include "support/fault_injection.h"

using namespace snapcache;
using namespace snapcache::test;

TEST_CASE("cli stats shows sizes entries and the hit miss and fallback counters", "[cli][stats]") {
  Cache cache;
  CHECK(cache.store->lookup(store_key(31)).result == LookupResult::miss);
  cache.publish(31);
  cache.publish(32);
  for (int i = 0; i < 2; ++i) CHECK(cache.store->lookup(store_key(31)).result == LookupResult::hit);
  {
    // A storage failure in another process's store: counted as a fallback.
    auto fs = std::make_shared<FaultInjectingFileSystem>();
    auto faulty = *Store::open(test_config(cache.path()), fs);
    fs->inject({FsOp::stat, EIO, 0, 1, false, ""});
    CHECK(faulty->lookup(store_key(31)).result == LookupResult::fallback);
  }
  REQUIRE(make_directories(cache.store->fs(), cache.path() + "/tmp/" + std::string(32, 'b') + ".1-0-x").is_ok());

  auto run = run_cli(with_dir(cache, {"stats", "--json"}), {"SNAPCACHE_CAPACITY_GIB=2"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["directory"] == cache.path());
  CHECK(j["capacity_bytes"] == 2 * kGiB);
  CHECK(j["bytes"] == total_bytes(*cache.store).value());
  CHECK(j["disk"]["available_bytes"].get<std::uint64_t>() > 0);
  CHECK(j["disk"]["reserve_bytes"] == kGiB);
  CHECK(j["entries"]["ok"] == 2);
  CHECK(j["entries"]["damaged"] == 0);
  CHECK(j["entries"]["unfinished"] == 1);
  CHECK(j["entries"]["leased"] == 0);
  const auto& c = j["counters"];
  CHECK(c["hits"] == 2);
  CHECK(c["misses"] == 1);
  CHECK(c["fallbacks"] == 1);
  CHECK(c["damaged"] == 0);
  CHECK(c["published"] == 2);
  CHECK(c["since_unix_ns"].get<std::int64_t>() > 0);
  CHECK(std::abs(j["hit_rate"].get<double>() - 0.5) < 1e-9);

  auto text = run_cli(with_dir(cache, {"stats"}));
  INFO(text.out);
  CHECK(contains(text.out, "2 hits, 1 misses, 0 damaged, 1 fallbacks (hit rate 50.0%)"));
  CHECK(contains(text.out, "2 ok, 0 damaged, 1 unfinished"));
  CHECK(contains(text.out, "of 128.0 GiB capacity"));
  CHECK(contains(text.out, "GiB"));

  auto zero = run_cli(with_dir(cache, {"stats", "--zero", "--json"}));
  CHECK(zero.exit_code == 0);
  CHECK(zero.json()["counters"]["hits"] == 0);
  CHECK(zero.json()["hit_rate"].is_null());
  CHECK(cache.store->lookup(store_key(32)).result == LookupResult::hit);
  CHECK(run_cli(with_dir(cache, {"stats", "--json"})).json()["counters"]["hits"] == 1);
}
