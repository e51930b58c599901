// snapcache evict: leases are respected, --dry-run changes nothing, the selection rules.
#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"
#include "support/child_process.h"

using namespace snapcache;
using namespace snapcache::test;

TEST_CASE("cli evict never evicts an entry leased by another process and says who holds it", "[cli][evict]") {
  Cache cache;
  const std::string held = cache.publish(11);
  const std::string free = cache.publish(12, 2);
  const std::uint64_t free_bytes = entry_info(*cache.store, free)->bytes;
  ChildProcess holder(kStoreHelper, {"hold", cache.path(), "11"});
  REQUIRE(holder.wait_for_line("holding"));

  auto named = run_cli(with_dir(cache, {"evict", held.substr(0, 8)}));
  INFO(named.out << named.err);
  CHECK(named.exit_code == 4);
  CHECK(contains(named.out, "skipped"));
  CHECK(contains(named.out, "leased by pid " + std::to_string(holder.pid())));
  CHECK(path_exists(cache.store->entry_path(held)));

  auto run = run_cli(with_dir(cache, {"evict", "--all", "--json"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 4);
  auto j = run.json();
  CHECK(j["dry_run"] == false);
  REQUIRE(j["evicted"].size() == 1);
  CHECK(j["evicted"][0]["id"] == free);
  CHECK(j["evicted"][0]["bytes"] == free_bytes);
  CHECK(j["bytes_freed"] == free_bytes);
  CHECK(j["bytes_before"].get<std::uint64_t>() - j["bytes_after"].get<std::uint64_t>() == free_bytes);
  REQUIRE(j["skipped"].size() == 1);
  CHECK(j["skipped"][0]["id"] == held);
  CHECK(contains(j["skipped"][0]["reason"].get<std::string>(), "leased by pid " + std::to_string(holder.pid())));
  CHECK(j["skipped"][0]["lease_holders"][0]["pid"] == holder.pid());
  CHECK(path_exists(cache.store->entry_path(held)));
  CHECK_FALSE(path_exists(cache.store->entry_path(free)));

  // Once the holder is gone, so is the lease.
  holder.kill_now();
  auto after = run_cli(with_dir(cache, {"evict", "--all"}));
  INFO(after.out << after.err);
  CHECK(after.exit_code == 0);
  CHECK(contains(after.out, "freed"));
  CHECK_FALSE(path_exists(cache.store->entry_path(held)));
}

TEST_CASE("cli evict and gc with --dry-run change nothing", "[cli][evict]") {
  Cache cache;
  const std::string a = cache.publish(13);
  const std::string b = cache.publish(14);
  set_age(cache.lease_path(a), 30 * 86400);
  const std::string before = tree_snapshot(cache.path());

  auto run = run_cli(with_dir(cache, {"evict", "--all", "--dry-run", "--json"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["dry_run"] == true);
  CHECK(j["evicted"].size() == 2);
  CHECK(j["bytes_freed"].get<std::uint64_t>() > 0);
  CHECK(j["bytes_after"].get<std::uint64_t>() < j["bytes_before"].get<std::uint64_t>());

  auto text = run_cli(with_dir(cache, {"evict", "--older-than", "7d", "-n"}));
  INFO(text.out);
  CHECK(text.exit_code == 0);
  CHECK(contains(text.out, "would evict"));
  CHECK(contains(text.out, a.substr(0, 12)));
  CHECK_FALSE(contains(text.out, b.substr(0, 12)));
  CHECK(contains(text.out, "would free"));

  CHECK(run_cli(with_dir(cache, {"gc", "--dry-run", "--grace", "0"})).exit_code == 0);
  CHECK(tree_snapshot(cache.path()) == before);
}

TEST_CASE("cli evict by age and by size takes the least recently used first", "[cli][evict]") {
  Cache cache;
  const std::string oldest = cache.publish(15);
  const std::string older = cache.publish(16);
  const std::string recent = cache.publish(17);
  set_age(cache.lease_path(oldest), 10 * 86400);
  set_age(cache.lease_path(older), 2 * 86400);

  auto by_age = run_cli(with_dir(cache, {"evict", "--older-than", "7d", "--json"})).json();
  REQUIRE(by_age["evicted"].size() == 1);
  CHECK(by_age["evicted"][0]["id"] == oldest);
  CHECK(path_exists(cache.store->entry_path(older)));

  // Room for one entry: the older goes, the recent one stays.
  const std::uint64_t one = entry_info(*cache.store, recent)->bytes;
  auto by_size = run_cli(with_dir(cache, {"evict", "--to-size", std::to_string(one + 1000) + "B", "--json"}));
  INFO(by_size.out << by_size.err);
  CHECK(by_size.exit_code == 0);
  auto j = by_size.json();
  REQUIRE(j["evicted"].size() == 1);
  CHECK(j["evicted"][0]["id"] == older);
  CHECK(j["bytes_after"].get<std::uint64_t>() <= one + 1000);
  CHECK(path_exists(cache.store->entry_path(recent)));

  auto units = run_cli(with_dir(cache, {"evict", "--to-size", "1GiB"}));
  CHECK(units.exit_code == 0);
  CHECK(contains(units.out, "freed 0 B (0 entries)"));
  CHECK(path_exists(cache.store->entry_path(recent)));
}

TEST_CASE("cli evict reports an entry it cannot remove as an error (exit 5), not as in use (exit 4)", "[cli][evict]") {
  Cache cache;
  const std::string good = cache.publish(18);
  // A file where an entry's directory should be: removing it fails with ENOTDIR, which says
  // nothing about leases.
  const std::string planted = cache.path() + "/entries/" + std::string(32, 'a');
  write_bytes(planted, "not an entry");
  auto run = run_cli(with_dir(cache, {"evict", "--all", "--json"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 5);
  auto j = run.json();
  CHECK(j["skipped"].empty());
  REQUIRE(j["failed"].size() == 1);
  CHECK(j["failed"][0]["id"] == std::string(32, 'a'));
  CHECK(contains(j["failed"][0]["reason"].get<std::string>(), "Not a directory"));
  REQUIRE(j["evicted"].size() == 1);
  CHECK(j["evicted"][0]["id"] == good);

  auto text = run_cli(with_dir(cache, {"evict", "--all"}));
  INFO(text.out << text.err);
  CHECK(text.exit_code == 5);
  CHECK(contains(text.out, "could not be written"));
  CHECK_FALSE(contains(text.out, "in use"));
}
