// snapcache stats: sizes, entries by state, and the counters the library keeps.
#include <cerrno>
#include <cmath>
#include <ctime>
#include <map>

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

TEST_CASE("cli stats shows the hit rate by hour and by day and the space each component takes", "[cli][stats]") {
  Cache cache;
  const std::int64_t now_s = std::time(nullptr);
  const std::int64_t hour = now_s - now_s % 3600;
  constexpr std::int64_t kNs = 1'000'000'000;
  // Hours counted earlier: two hours ago, eight days ago (beyond the week kept), and a row that
  // is no hour's (whoever wrote it, it is not read).
  nlohmann::json planted = {{"version", 1}, {"since_unix_ns", (hour - 8 * 86400) * kNs}, {"hits", 8}, {"misses", 1},
                            {"published", 1},
                            {"hours", {{hour - 8 * 86400, 5, 0, 0, 0, 0}, {hour - 2 * 3600, 3, 1, 0, 0, 1},
                                       {"junk"}, {hour - 3600 + 1, 9, 9, 9, 9, 9}}}};
  write_bytes(cache.path() + "/stats.json", planted.dump());

  cache.publish(80);
  REQUIRE(publish_raw(*cache.store, store_key(82, "vae"), raw_model(82, 2)).result == PublishResult::published);
  CHECK(cache.store->lookup(store_key(80)).result == LookupResult::hit);
  CHECK(cache.store->lookup(store_key(81)).result == LookupResult::miss);

  auto run = run_cli(with_dir(cache, {"stats", "--json"}));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["history"]["bucket_seconds"] == 3600);
  const auto& hours = j["history"]["hours"];
  REQUIRE(hours.size() >= 2);
  CHECK(hours[0]["start_unix_ns"] == (hour - 2 * 3600) * kNs);
  CHECK(hours[0]["hits"] == 3);
  CHECK(hours[0]["misses"] == 1);
  CHECK(hours[0]["published"] == 1);
  CHECK(std::abs(hours[0]["hit_rate"].get<double>() - 0.75) < 1e-9);
  // This hour's (two, should the hour have turned meanwhile).
  std::uint64_t hits = 0, misses = 0, published = 0;
  for (std::size_t i = 1; i < hours.size(); ++i) {
    CHECK(hours[i]["start_unix_ns"].get<std::int64_t>() >= hour * kNs);
    hits += hours[i]["hits"].get<std::uint64_t>();
    misses += hours[i]["misses"].get<std::uint64_t>();
    published += hours[i]["published"].get<std::uint64_t>();
  }
  CHECK(hits == 1);
  CHECK(misses == 1);
  CHECK(published == 2);
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> components;
  for (const auto& c : j["components"])
    components[c["component"].get<std::string>()] = {c["entries"].get<std::uint64_t>(), c["bytes"].get<std::uint64_t>()};
  REQUIRE(components.size() == 2);
  CHECK(components["dit"].first == 1);
  CHECK(components["vae"].first == 1);
  CHECK(components["vae"].second > components["dit"].second);  // 2 MiB against 1
  CHECK(components["dit"].second + components["vae"].second == j["bytes"].get<std::uint64_t>());

  auto text = run_cli(with_dir(cache, {"stats"}));
  INFO(text.out);
  CHECK(contains(text.out, "by hour (the last 24 hours with any)"));
  CHECK(contains(text.out, "HOUR              LOOKUPS  HITS  MISSES  FALLBACKS  HIT RATE  PUBLISHED"));
  CHECK(contains(text.out, "75.0%"));
  CHECK(contains(text.out, "by day (the last 7 days with any)"));
  CHECK(contains(text.out, "space by component"));
  CHECK(contains(text.out, "\n  vae  "));
  CHECK(contains(text.out, "\n  COMPONENT  ENTRIES"));

  // Zeroing clears the history too.
  auto zero = run_cli(with_dir(cache, {"stats", "--zero", "--json"}));
  CHECK(zero.json()["history"]["hours"].empty());
}
