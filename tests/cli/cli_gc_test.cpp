// snapcache gc: dead writers' leftovers and stray files go; publications in progress stay.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <map>
#include <set>
#include <utility>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "store/layout.h"
#include "support/catch.h"
#include "snapcache/key.h"

using namespace snapcache;
using namespace snapcache::test;

namespace {

// A publication directory as a writer leaves it while it works (or after it died).
// An unfinished publication whose writer had locked and marked its lease (`marked`), or one that
// may still be about to (an empty lease).
std::string make_unfinished(Cache& cache, const std::string& name, bool marked = true) {
  const std::string path = cache.path() + "/tmp/" + name;
  REQUIRE(make_directories(cache.store->fs(), path).is_ok());
  write_bytes(path + "/lease", marked ? std::string(store::kLeaseTakenMark) : "");
  write_bytes(path + "/data-0000.bin", std::string(5000, 'x'));
  return path;
}

}  // namespace

TEST_CASE("cli gc leaves a publication in progress alone and removes what no one will finish", "[cli][gc]") {
  Cache cache;
  const std::string id = cache.publish(21);
  const std::string other = std::string(32, 'a');

  // In progress: its writer holds the lease, even though it is older than the grace period.
  const std::string writing = make_unfinished(cache, other + ".100-0-live");
  int lease = ::open((writing + "/lease").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(lease >= 0);
  REQUIRE(::flock(lease, LOCK_EX | LOCK_NB) == 0);
  set_age(writing, 3 * 3600);
  // Dead writer, long ago.
  const std::string dead = make_unfinished(cache, other + ".101-0-dead");
  set_age(dead, 3 * 3600);
  // Unlocked but fresh: its writer is gone, but it is younger than the grace period.
  const std::string fresh = make_unfinished(cache, other + ".102-0-new");
  // Unlocked, unmarked and fresh: perhaps a writer between creating its lease and locking it.
  const std::string starting = make_unfinished(cache, other + ".103-0-starting", /*marked=*/false);
  // Files that belong to no entry, old and new.
  const std::string stray_entry_file = cache.store->entry_path(id) + "/verified.snap.tmp.999.0";
  write_bytes(stray_entry_file, "torn");
  set_age(stray_entry_file, 2 * 86400);
  const std::string stray_in_entries = cache.path() + "/entries/notes.txt";
  write_bytes(stray_in_entries, "hello");
  set_age(stray_in_entries, 2 * 86400);
  const std::string stray_leftover = cache.path() + "/stats.json.tmp.999.3";
  write_bytes(stray_leftover, "{");
  set_age(stray_leftover, 2 * 86400);
  const std::string new_stray = cache.path() + "/entries/just-now.txt";
  write_bytes(new_stray, "hi");
  const std::string operators_file = cache.path() + "/README.operator";
  write_bytes(operators_file, "ours, not the cache's");
  set_age(operators_file, 30 * 86400);

  auto dry = run_cli(with_dir(cache, {"gc", "--dry-run", "--json"}));
  INFO(dry.out << dry.err);
  CHECK(dry.exit_code == 0);
  CHECK(dry.json()["removed"].size() == 4);
  CHECK(path_exists(dead));

  auto run = run_cli(with_dir(cache, {"gc", "--json"}));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["dry_run"] == false);
  CHECK(j["grace_seconds"] == 3600);
  std::set<std::string> removed;
  for (const auto& item : j["removed"]) removed.insert(item["path"].get<std::string>());
  CHECK(removed == std::set<std::string>{dead, stray_entry_file, stray_in_entries, stray_leftover});
  CHECK(j["bytes_freed"].get<std::uint64_t>() >= 5000);
  std::set<std::string> kept;
  for (const auto& item : j["kept_unfinished"]) kept.insert(item["path"].get<std::string>());
  CHECK(kept == std::set<std::string>{writing, fresh, starting});

  CHECK(path_exists(writing + "/data-0000.bin"));
  CHECK(path_exists(fresh));
  CHECK(path_exists(new_stray));
  CHECK(path_exists(operators_file));
  CHECK_FALSE(path_exists(dead));
  CHECK_FALSE(path_exists(stray_entry_file));
  // The entry itself is untouched and still loads.
  CHECK(cache.store->lookup(store_key(21)).result == LookupResult::hit);

  // Without a grace period the fresh leftovers go too; the locked publication still stays, and so
  // does one whose writer may be about to lock its lease (it gets the hour a leaseless one does).
  auto now = run_cli(with_dir(cache, {"gc", "--grace", "0"}));
  INFO(now.out);
  CHECK(now.exit_code == 0);
  CHECK(contains(now.out, "removed"));
  CHECK(contains(now.out, "kept"));
  CHECK_FALSE(path_exists(fresh));
  CHECK_FALSE(path_exists(new_stray));
  CHECK(path_exists(writing + "/data-0000.bin"));
  CHECK(path_exists(starting + "/data-0000.bin"));
  set_age(starting, 2 * 3600);
  CHECK(run_cli(with_dir(cache, {"gc", "--grace", "0"})).exit_code == 0);
  CHECK_FALSE(path_exists(starting));
  ::close(lease);
}

TEST_CASE("cli gc reports every removal, and a file where the cache keeps a directory is junk, not an error",
          "[cli][gc]") {
  Cache cache;
  const std::string id = cache.publish(22);
  const std::string dead = make_unfinished(cache, std::string(32, 'b') + ".104-0-dead");
  set_age(dead, 2 * 3600);
  // misses/ as a regular file, and a file in trash/ where a removed entry's directory would be.
  const std::string misses = cache.path() + "/misses";
  write_bytes(misses, "not a directory");
  const std::string in_trash = cache.path() + "/trash/" + std::string(32, 'c') + ".105-0-x";
  write_bytes(in_trash, std::string(300, 'y'));

  auto dry = run_cli(with_dir(cache, {"gc", "--dry-run"}));
  INFO(dry.out << dry.err);
  CHECK(dry.exit_code == 0);
  CHECK(path_exists(dead));

  auto run = run_cli(with_dir(cache, {"gc", "--json"}));
  INFO(run.out << run.err);
  // It was exit 5 ("not a directory") after removing the dead writer's leftover without a word.
  REQUIRE(run.exit_code == 0);
  std::map<std::string, std::pair<std::string, std::uint64_t>> removed;
  const auto j = run.json();
  for (const auto& item : j["removed"])
    removed[item["path"].get<std::string>()] = {item["reason"].get<std::string>(), item["bytes"].get<std::uint64_t>()};
  REQUIRE(removed.size() == 3);
  CHECK(removed[dead].first == "unfinished publication, its writer is gone");
  CHECK(removed[dead].second >= 5000);
  CHECK(removed[misses] == std::make_pair(std::string("a file where misses/ should be a directory"), std::uint64_t{15}));
  CHECK(removed[in_trash] ==
        std::make_pair(std::string("a file in trash/, where removed entries are directories"), std::uint64_t{300}));
  CHECK_FALSE(path_exists(dead));
  CHECK_FALSE(path_exists(misses));
  CHECK_FALSE(path_exists(in_trash));
  // The next miss makes misses/ again; the entry is untouched.
  CHECK(cache.store->lookup(store_key(23)).result == LookupResult::miss);
  CHECK(path_exists(misses + "/" + key_id(store_key(23)) + ".key"));
  CHECK(cache.store->lookup(store_key(22)).result == LookupResult::hit);
}

TEST_CASE("cli gc removes a misses/ that is a link itself and never what it points to", "[cli][gc][hostile]") {
  Cache cache;
  cache.publish(24);
  TempDir outside;
  write_bytes(outside / "notes.txt", "someone's file");
  set_age(outside / "notes.txt", 2 * 86400);
  const std::string misses = cache.path() + "/misses";
  REQUIRE(::symlink(outside.path().c_str(), misses.c_str()) == 0);

  auto run = run_cli(with_dir(cache, {"gc"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(contains(run.out, "removed  " + misses));
  CHECK(contains(run.out, "a symbolic link where misses/ should be a directory"));
  CHECK(contains(run.out, "removed 1 item"));
  CHECK(read_bytes(outside / "notes.txt") == "someone's file");  // gc listed the link and removed it
  CHECK_FALSE(path_exists(misses));
}
