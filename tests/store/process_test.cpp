// Real second processes: racing publishers, writers killed mid-publication, leases held elsewhere.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "support/kill_trials.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

using namespace snapcache;

TEST_CASE("concurrent publishers of one key in separate processes all succeed and leave one entry",
          "[store][process]") {
  test::TempDir dir;
  std::vector<std::unique_ptr<test::ChildProcess>> children;
  for (int i = 0; i < 4; ++i)
    children.push_back(std::make_unique<test::ChildProcess>(test::kStoreHelper, std::vector<std::string>{"publish", dir.path(), "31", "8"}));
  for (auto& c : children) CHECK(c->wait() == 0);
  auto store = *Store::open(test::test_config(dir.path()));
  auto entries = list_entries(*store).value();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].state == EntryState::ok);
  CHECK((test::count_entries(dir.path() + "/tmp") == 0));
  CHECK(test::run_helper(test::kStoreHelper, {"load", dir.path(), "31"}) == 0);
  CHECK(verify_entry(*store, entries[0].id).status.is_ok());
}

TEST_CASE("a writer killed at any moment leaves no entry or a whole one and never a torn one", "[store][process]") {
  // CI kills 12 writers; SNAPCACHE_KILL_TRIALS=1000 is the long run (docs/reliability.md).
  test::KillTrials trials;
  trials.writer = [](const std::string& cache) { return std::vector<std::string>{"publish", cache, "32", "32"}; };
  trials.seed = 32;
  trials.mib = 32;
  trials.rounds = 12;
  trials.rng_seed = 1234;
  const test::KillCounts counts = test::run_kill_trials(trials);
  WARN(counts.whole + counts.none << " writers killed: " << counts.whole << " left a whole entry, " << counts.none
                                  << " none");
}

TEST_CASE("a lease held by another process blocks eviction until that process ends", "[store][process]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  REQUIRE(test::publish_raw(*store, test::store_key(33), test::raw_model(33, 1)).result == PublishResult::published);
  const std::string id = key_id(test::store_key(33));
  {
    test::ChildProcess holder(test::kStoreHelper, {"hold", dir.path(), "33"});
    REQUIRE(holder.wait_for_line("holding"));
    auto removed = remove_entry(*store, id);
    CHECK(removed.status().code() == StatusCode::busy);
    CHECK(removed.status().message().find(std::to_string(holder.pid())) != std::string::npos);
    auto info = entry_info(*store, id);
    REQUIRE(info.is_ok());
    CHECK(info->leased);
    CHECK(info->lease_holders == std::vector<int>{holder.pid()});
    // A publication that needs its room cannot evict it either.
    Config tight = test::test_config(dir.path());
    tight.capacity_bytes = total_bytes(*store).value() + (1 << 20);
    auto tight_store = *Store::open(tight);
    auto out = test::publish_raw(*tight_store, test::store_key(34), test::raw_model(34, 2));
    CHECK(out.result == PublishResult::skipped);
    CHECK(out.status.code() == StatusCode::no_space);
    CHECK(out.status.message().find("1 leased entries could not be evicted") != std::string::npos);
    holder.kill_now();  // the kernel drops the lock with the process
  }
  auto info = entry_info(*store, id);
  REQUIRE(info.is_ok());
  CHECK_FALSE(info->leased);
  CHECK(remove_entry(*store, id).is_ok());
  CHECK(list_entries(*store).value().empty());
}

TEST_CASE("a soak of processes publishing, loading, evicting, verifying and collecting keeps every invariant",
          "[store][process][soak]") {
  // CI soaks for 8 s; SNAPCACHE_SOAK_SECONDS=180 is the long run.
  const char* seconds_env = std::getenv("SNAPCACHE_SOAK_SECONDS");
  const std::string seconds = seconds_env != nullptr ? seconds_env : "8";
  test::TempDir cache;
  std::vector<std::unique_ptr<test::ChildProcess>> workers;
  for (int w = 0; w < 4; ++w)
    workers.push_back(std::make_unique<test::ChildProcess>(
        test::kStoreHelper, std::vector<std::string>{"soak", cache.path(), seconds, std::to_string(w)}));
  for (auto& w : workers) {
    // Each worker checked its own loads, held leases, verify reports, descriptors and mappings.
    CHECK(w->wait_for_line("result ok"));
    CHECK(w->wait() == 0);
  }
  Config config = test::test_config(cache.path());
  config.capacity_bytes = test::kSoakCapacity;
  auto store = *Store::open(config);
  // Within the capacity: publishers make room and reserve it one at a time.
  auto total = total_bytes(*store);
  REQUIRE(total.is_ok());
  CHECK(*total <= test::kSoakCapacity);
  // Nothing false, nothing left behind.
  auto entries = list_entries(*store);
  REQUIRE(entries.is_ok());
  for (const auto& e : *entries) {
    INFO("entry " << e.id);
    CHECK(e.state == EntryState::ok);
    CHECK(verify_entry(*store, e.id).status.is_ok());
  }
  (void)collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
  CHECK(test::count_entries(cache.path() + "/tmp") == 0);
  CHECK(test::count_entries(cache.path() + "/trash") == 0);
}

TEST_CASE("an eviction or a verify killed at any moment leaves a sound cache", "[store][process]") {
  // CI kills 8 of each; SNAPCACHE_KILL_TRIALS sets the count for the long run.
  const char* trials_env = std::getenv("SNAPCACHE_KILL_TRIALS");
  const int rounds = trials_env != nullptr ? std::max(1, std::atoi(trials_env)) : 8;
  std::mt19937 rng(4321);
  for (const std::string op : {"evict", "verify"}) {
    int kept = 0;
    for (int round = 0; round < rounds; ++round) {
      test::TempDir cache;
      REQUIRE(test::run_helper(test::kStoreHelper, {"publish", cache.path(), "33", "8"}) == 0);
      test::ChildProcess killed(test::kStoreHelper, {op, cache.path(), "33"});
      REQUIRE(killed.wait_for_line("ready"));
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
      killed.kill_now();
      auto store = *Store::open(test::test_config(cache.path()));
      auto loaded = store->lookup(test::store_key(33), VerifyPolicy::always_rehash);
      INFO(op << " round " << round << ": " << to_string(loaded.result) << " " << loaded.reason);
      // Whole or gone: an interrupted eviction never leaves half an entry in entries/, an
      // interrupted verify changes nothing.
      REQUIRE((loaded.result == LookupResult::hit || loaded.result == LookupResult::miss));
      if (op == "verify") CHECK(loaded.result == LookupResult::hit);
      if (loaded.result == LookupResult::hit) {
        ++kept;
        CHECK(test::same_data(*loaded.snapshot, test::raw_model(33, 8)));
      }
      loaded.snapshot.reset();
      (void)collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
      CHECK(test::count_entries(cache.path() + "/trash") == 0);
    }
    WARN(rounds << " " << op << " processes killed; the entry survived " << kept << " times");
  }
}

TEST_CASE("eight ranks publishing into one cache at once keep its capacity, its reserve and its leases",
          "[store][process][ranks]") {
  test::TempDir dir;
  const std::string cache = dir / "cache";
  // Four older entries of about 3.6 MiB; two are held (loaded) by other processes throughout.
  {
    auto store = *Store::open(test::test_config(cache));
    for (int seed = 500; seed < 504; ++seed)
      REQUIRE(test::publish_raw(*store, test::store_key(seed), test::raw_model(seed, 8)).result ==
              PublishResult::published);
  }
  std::vector<std::unique_ptr<test::ChildProcess>> holders;
  std::set<std::string> leased;
  for (int seed : {500, 501}) {
    holders.push_back(std::make_unique<test::ChildProcess>(
        test::kStoreHelper, std::vector<std::string>{"hold", cache, std::to_string(seed)}));
    REQUIRE(holders.back()->wait_for_line("holding"));
    leased.insert(key_id(test::store_key(seed)));
  }

  // Eight ranks of about 6.6 MiB each into 30 MiB, of which the held entries keep about 7: room
  // for three at a time, so ranks evict older entries and each other's, or are skipped. Every
  // write takes 5 ms, as on a busy or network disk: a publication's steps take time, and
  // publishers run side by side, however many cores the machine has.
  const std::uint64_t capacity = 30ull << 20;
  const std::uint64_t reserve = 64ull << 20;
  const std::string go = dir / "go";
  std::vector<std::unique_ptr<test::ChildProcess>> ranks;
  for (int rank = 0; rank < 8; ++rank) {
    ranks.push_back(std::make_unique<test::ChildProcess>(
        test::kStoreHelper, std::vector<std::string>{"rank-publish", cache, std::to_string(rank), "16",
                                                     std::to_string(capacity), std::to_string(reserve), go, "5"}));
  }
  for (auto& r : ranks) REQUIRE(r->wait_for_line("ready"));
  test::write_bytes(go, "");

  struct Outcome {
    std::string result, id, message;
    std::vector<std::string> evicted;
  };
  std::vector<Outcome> outcomes;
  std::set<std::string> evicted_by_ranks;
  for (auto& r : ranks) {
    REQUIRE(r->wait_for_line("result "));
    std::istringstream line(r->last_line().substr(7));
    Outcome o;
    std::string evicted;
    line >> o.result >> o.id >> evicted;
    std::getline(line, o.message);
    for (std::size_t at = 0; evicted != "-" && at < evicted.size(); at += 33) o.evicted.push_back(evicted.substr(at, 32));
    evicted_by_ranks.insert(o.evicted.begin(), o.evicted.end());
    INFO(r->last_line());
    CHECK(r->wait() == 0);
    outcomes.push_back(std::move(o));
  }

  Config config = test::test_config(cache);
  config.capacity_bytes = capacity;
  auto store = *Store::open(config);
  // Capacity and reserve: never more than the capacity, not even by one publication.
  auto total = total_bytes(*store);
  REQUIRE(total.is_ok());
  CHECK(*total <= capacity);
  int published = 0, skipped = 0;
  for (const auto& o : outcomes) published += o.result == "published";
  auto space = store->fs().space(cache);
  REQUIRE(space.is_ok());
  if (published > 0) CHECK(space->available_bytes >= reserve);

  // Leases: no rank evicted a held entry, and each holder still reads what it loaded.
  for (const auto& id : leased) {
    CHECK(evicted_by_ranks.count(id) == 0);
    CHECK(verify_entry(*store, id).status.is_ok());
  }
  for (auto& h : holders) {
    ::kill(h->pid(), SIGUSR1);
    REQUIRE(h->wait_for_line("still "));
    CHECK(h->last_line() == "still hit");
  }

  // Every outcome agrees with the disk: a published entry is there and sound unless a later rank
  // evicted it (it was unleased); a skipped one says why; none failed.
  std::uint64_t evictions = 0;
  for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
    const Outcome& o = outcomes[rank];
    INFO("rank " << rank << ": " << o.result << " " << o.message);
    evictions += o.evicted.size();
    CHECK(o.id == key_id([&] {
            Key k = test::store_key(600);
            k.topology.tp_rank = static_cast<int>(rank);
            k.topology.tp_size = 8;
            return k;
          }()));
    if (o.result == "published") {
      if (test::path_exists(store->entry_path(o.id))) {
        CHECK(verify_entry(*store, o.id).status.is_ok());
      } else {
        CHECK(evicted_by_ranks.count(o.id) == 1);
      }
    } else {
      REQUIRE(o.result == "skipped");
      ++skipped;
      CHECK(o.message.find("no_space") != std::string::npos);
      CHECK(o.message.find("needs") != std::string::npos);
      CHECK_FALSE(test::path_exists(store->entry_path(o.id)));
    }
  }
  CHECK(published > 0);
  // Counters: the four older publications, then the ranks'.
  auto counters = read_counters(*store);
  REQUIRE(counters.is_ok());
  CHECK(counters->published == 4u + static_cast<std::uint64_t>(published));
  CHECK(counters->publish_skipped == static_cast<std::uint64_t>(skipped));
  CHECK(counters->publish_failed == 0u);
  CHECK(counters->evicted == evictions);

  for (auto& h : holders) h->kill_now();
  (void)collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
  CHECK(test::count_entries(cache + "/tmp") == 0);
  CHECK(test::count_entries(cache + "/trash") == 0);
  WARN("8 ranks: " << published << " published, " << skipped << " skipped, " << evictions << " evictions, "
                   << *total << " of " << capacity << " bytes used");
}
