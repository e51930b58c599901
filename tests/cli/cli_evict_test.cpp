// snapcache evict: leases are respected, --dry-run changes nothing, the selection rules.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"

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

TEST_CASE("cli ls marks an entry whose checkpoint changed or vanished as stale, and evict --stale removes it",
          "[cli][evict][stale]") {
  Cache cache;
  // Three entries keyed by real checkpoint files, as a loader makes them: one whose file is only
  // touched (a new mtime, the same bytes: a load hashes it and is served), one whose file is then
  // rewritten longer, one whose file is removed.
  std::vector<std::string> ids;
  std::vector<std::string> files;
  for (int seed : {21, 22, 23}) {
    const std::string file = cache.dir / ("model-" + std::to_string(seed) + ".safetensors");
    write_bytes(file, std::string(100 + seed, 'w'));
    auto described = describe_checkpoint(*posix_file_system(), {file});
    REQUIRE(described.is_ok());
    Key key = store_key(seed);
    key.checkpoint = *described;
    PublishOptions options;
    options.chunk_size = 1 << 20;
    auto out = publish_raw(*cache.store, key, raw_model(seed, 1), options);
    REQUIRE(out.result == PublishResult::published);
    ids.push_back(out.entry_id);
    files.push_back(file);
  }
  // A content-keyed entry names no path: it is never stale, wherever its bytes went.
  Key by_content = store_key(24);
  by_content.checkpoint[0].content_digest = std::string(32, 'a');
  by_content.checkpoint[0] = checkpoint_identity(by_content.checkpoint[0]);
  PublishOptions options;
  options.chunk_size = 1 << 20;
  const std::string content_id = publish_raw(*cache.store, by_content, raw_model(24, 1), options).entry_id;
  REQUIRE_FALSE(content_id.empty());

  set_age(files[0], 3600);                           // touched: another mtime, the same bytes
  write_bytes(files[1], std::string(200, 'w'));       // other bytes, another size
  REQUIRE(::unlink(files[2].c_str()) == 0);

  auto listed = run_cli(with_dir(cache, {"ls", "--json"}));
  INFO(listed.out << listed.err);
  REQUIRE(listed.exit_code == 0);
  std::map<std::string, nlohmann::json> by_id;
  const nlohmann::json listing = listed.json();
  for (const auto& e : listing["entries"]) by_id[e["id"].get<std::string>()] = e;
  REQUIRE(by_id.size() == 4);
  CHECK(by_id[ids[0]]["stale"].is_null());
  CHECK(by_id[content_id]["stale"].is_null());
  REQUIRE(by_id[ids[1]]["stale"].is_string());
  CHECK(contains(by_id[ids[1]]["stale"].get<std::string>(), "changed since the entry was made (its size differs)"));
  REQUIRE(by_id[ids[2]]["stale"].is_string());
  CHECK(contains(by_id[ids[2]]["stale"].get<std::string>(), "is gone"));
  for (const auto& id : ids) CHECK(by_id[id]["state"] == "ok");  // the bytes are sound

  auto text = run_cli(with_dir(cache, {"ls"}));
  CHECK(contains(text.out, "ok, stale"));
  auto inspect = run_cli(with_dir(cache, {"inspect", ids[1]}));
  CHECK(contains(inspect.out, "no load can reach it"));

  const std::string before = tree_snapshot(cache.path());
  auto dry = run_cli(with_dir(cache, {"evict", "--stale", "--dry-run", "--json"}));
  INFO(dry.out << dry.err);
  REQUIRE(dry.exit_code == 0);
  std::vector<std::string> would;
  const nlohmann::json dry_json = dry.json();
  for (const auto& e : dry_json["evicted"]) would.push_back(e["id"].get<std::string>());
  std::sort(would.begin(), would.end());
  std::vector<std::string> expected = {ids[1], ids[2]};
  std::sort(expected.begin(), expected.end());
  CHECK(would == expected);
  CHECK(tree_snapshot(cache.path()) == before);

  auto real = run_cli(with_dir(cache, {"evict", "--stale"}));
  INFO(real.out << real.err);
  CHECK(real.exit_code == 0);
  CHECK(path_exists(cache.store->entry_path(ids[0])));
  CHECK(path_exists(cache.store->entry_path(content_id)));
  CHECK_FALSE(path_exists(cache.store->entry_path(ids[1])));
  CHECK_FALSE(path_exists(cache.store->entry_path(ids[2])));
}
