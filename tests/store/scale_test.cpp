// A cache of many entries: what making room and explaining a miss cost, counted in file-system
// calls (never timed; bench/store_scale_bench.cpp times them at 100k and 1M entries), and the index a
// miss uses, as untrusted input.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "store/entry_index.h"
#include "store/size_ledger.h"
#include "store/use_order.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"
#include "support/fault_injection.h"

using namespace snapcache;

namespace {

// One storage of `bytes`: entries as small as an entry gets, so a test can have a hundred.
test::RawModel tiny_model(std::size_t bytes) {
  test::RawModel m;
  m.storages.emplace_back(bytes, std::byte{7});
  m.tensors.push_back({"w", DType::int8, {static_cast<std::int64_t>(bytes)}, {1}, 0, 0});
  return m;
}

std::uint64_t all_calls(const FaultInjectingFileSystem& fs) {
  std::uint64_t n = 0;
  for (int op = 0; op < kFileSystemCalls; ++op) n += fs.calls(static_cast<FsOp>(op));
  return n;
}

// store_key(checkpoint) as rank `rank` of 4: entries that share a checkpoint, as a node's ranks do.
Key rank_key(int checkpoint, int rank) {
  Key k = test::store_key(checkpoint);
  k.topology.tp_rank = rank;
  k.topology.tp_size = 4;
  return k;
}

std::string index_dir(const std::string& cache) { return cache + "/" + store::kIndexDir; }
std::string record_path(const std::string& cache, const Key& key) {
  return store::index_record_path(cache, key, key_id(key));
}
std::string parent_of(const std::string& path) { return path.substr(0, path.rfind('/')); }

// A cache of `n` tiny entries of seeds 0..n-1, entry i last used i + 1 minutes after the first,
// all an hour ago; and, as an older snapcache left it, no size figure and no use order yet.
// Returns the store opened with a capacity one entry short of what the next publication needs.
std::shared_ptr<Store> old_cache(const std::string& cache, int n, std::shared_ptr<FileSystem> fs) {
  {
    auto roomy = *Store::open(test::test_config(cache), fs);
    for (int seed = 0; seed < n; ++seed)
      REQUIRE(test::publish_raw(*roomy, test::store_key(seed), tiny_model(64)).result == PublishResult::published);
  }
  const std::int64_t hour_ago = time(nullptr) - 3600;
  for (int seed = 0; seed < n; ++seed) {
    const timespec at[2] = {{hour_ago + seed * 60, 0}, {hour_ago + seed * 60, 0}};
    const std::string lease = cache + "/entries/" + key_id(test::store_key(seed)) + "/lease";
    REQUIRE(::utimensat(AT_FDCWD, lease.c_str(), at, 0) == 0);
  }
  std::filesystem::remove_all(cache + "/" + store::kUseOrderDir);
  std::filesystem::remove(cache + "/" + store::kSizeFile);
  Config tight = test::test_config(cache);
  auto store = *Store::open(tight, fs);
  const std::uint64_t total = total_bytes(*store).value();
  tight.capacity_bytes = total + total / n / 2;  // every entry is about total / n (the keys differ by a digit)
  return *Store::open(tight, fs);
}

}  // namespace

TEST_CASE("making room counts the cache instead of measuring it, and reads the oldest entries, not every one",
          "[store][capacity][scale]") {
  // The same publications in a cache of 40 and of 160 entries cost the same file-system calls
  // once the cache has been read the first time (a size figure, a use order); before, each
  // measured the cache and read every lease: calls in proportion to the entries.
  std::map<int, std::uint64_t> calls, evict_calls;
  for (int n : {40, 160}) {
    test::TempDir dir;
    auto fs = std::make_shared<FaultInjectingFileSystem>();
    auto store = old_cache(dir.path(), n, fs);
    // The first eviction reads every entry, once: the cache has no figure and no use order yet.
    auto first = test::publish_raw(*store, test::store_key(1000), tiny_model(64));
    REQUIRE(first.result == PublishResult::published);
    REQUIRE(first.evicted.size() == 1);
    CHECK(first.evicted[0].id == key_id(test::store_key(0)));
    CHECK(std::filesystem::is_regular_file(dir.path() + "/" + store::kSizeFile));
    // Entry 1 is used now: a hit dates its lease and nothing else; the order is corrected where
    // it is read.
    REQUIRE(store->lookup(test::store_key(1)).result == LookupResult::hit);
    fs->reset_counters();
    auto second = test::publish_raw(*store, test::store_key(1001), tiny_model(64));
    REQUIRE(second.result == PublishResult::published);
    REQUIRE(second.evicted.size() == 1);
    CHECK(second.evicted[0].id == key_id(test::store_key(2)));  // the least recently used now
    calls[n] = all_calls(*fs);
    // The figure the publications kept is the cache's size, as measured.
    CHECK(store::size_now(*store).value() == total_bytes(*store).value());
    CHECK(total_bytes(*store).value() <= store->config().capacity_bytes);
    // Room for about 25 more: the next 25 least recently used, in order.
    const std::uint64_t entry = total_bytes(*store).value() / static_cast<std::uint64_t>(n);
    auto many = test::publish_raw(*store, test::store_key(1002), tiny_model(64 + 24 * entry));
    REQUIRE(many.result == PublishResult::published);
    std::vector<std::string> expected, evicted;
    for (int seed = 3; seed < 3 + static_cast<int>(many.evicted.size()); ++seed)
      expected.push_back(key_id(test::store_key(seed)));
    for (const EvictedEntry& e : many.evicted) evicted.push_back(e.id);
    CHECK(many.evicted.size() >= 20);
    CHECK(evicted == expected);
    CHECK(store::size_now(*store).value() == total_bytes(*store).value());
    // `snapcache evict ID`: that entry alone, and the counted size.
    EvictRequest one;
    one.ids = {key_id(test::store_key(n - 1))};
    fs->reset_counters();
    auto gone = evict(*store, one);
    REQUIRE(gone);
    CHECK(gone->evicted == one.ids);
    evict_calls[n] = all_calls(*fs);
    CHECK(gone->bytes_after == total_bytes(*store).value());
  }
  INFO("a publication evicting one entry: " << calls[40] << " file-system calls among 40 entries, " << calls[160]
                                            << " among 160; evict ID: " << evict_calls[40] << " and "
                                            << evict_calls[160]);
  CHECK(calls[160] == calls[40]);
  CHECK(calls[40] < 200);
  CHECK(evict_calls[160] == evict_calls[40]);
}

TEST_CASE("a miss reads a few manifests to name the nearest entry, not one per entry", "[store][key][scale]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  // 120 entries: 30 checkpoints, 4 ranks each.
  for (int checkpoint = 0; checkpoint < 30; ++checkpoint)
    for (int rank = 0; rank < 4; ++rank)
      REQUIRE(test::publish_raw(*store, rank_key(checkpoint, rank), tiny_model(64)).result ==
              PublishResult::published);

  // Another torch for rank 1 of checkpoint 7: that entry differs in one field.
  Key upgraded = rank_key(7, 1);
  upgraded.torch.version = "2.12.0";
  fs->reset_counters();
  auto miss = store->lookup(upgraded);
  const std::uint64_t opens = fs->calls(FsOp::open);
  INFO(miss.reason << "; " << opens << " files opened");
  CHECK(miss.result == LookupResult::miss);
  CHECK(miss.reason.find("nearest entry " + key_id(rank_key(7, 1)).substr(0, 12) +
                         " (same component and checkpoint): torch " + test::store_key(7).torch.version +
                         " -> 2.12.0") != std::string::npos);
  CHECK(opens <= 20);  // every manifest would be 120

  // A new checkpoint: its model's first load, whatever the same component's other checkpoints hold.
  Key fresh = rank_key(99, 2);
  fs->reset_counters();
  auto other = store->lookup(fresh);
  INFO(other.reason);
  CHECK(other.result == LookupResult::miss);
  CHECK(other.reason == "no entry of component 'dit' for this checkpoint yet: this model's first load");
  CHECK(fs->calls(FsOp::open) <= 20);
}

TEST_CASE("the index a miss uses is untrusted: links are not followed, junk goes with gc, lost records come back",
          "[store][hostile][scale]") {
  test::TempDir dir;
  test::TempDir outside;
  const std::string cache = dir / "cache";
  auto store = *Store::open(test::test_config(cache));
  REQUIRE(test::publish_raw(*store, rank_key(1, 0), tiny_model(64)).result == PublishResult::published);
  CHECK(test::path_exists(record_path(cache, rank_key(1, 0))));

  // index/ replaced by a link to a directory elsewhere: nothing is made or listed there.
  test::remove_path(index_dir(cache));
  REQUIRE(::symlink(outside.path().c_str(), index_dir(cache).c_str()) == 0);
  REQUIRE(test::publish_raw(*store, rank_key(1, 1), tiny_model(64)).result == PublishResult::published);
  CHECK(test::list_names(outside.path()).empty());
  auto miss = store->lookup(rank_key(1, 2));  // still explained, from the entries themselves
  CHECK(miss.result == LookupResult::miss);
  CHECK(miss.reason.find("TP rank ") != std::string::npos);
  CHECK(miss.reason.find(" -> 2") != std::string::npos);
  auto collected = collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
  REQUIRE(collected.is_ok());
  REQUIRE(collected->size() == 1);
  CHECK((*collected)[0].path == index_dir(cache));
  CHECK((*collected)[0].reason == "a symbolic link where index/ should be a directory");
  CHECK(test::path_exists(outside.path()));
  CHECK(test::list_names(outside.path()).empty());
  // gc made the records of both entries again, in a directory of its own.
  struct stat st {};
  REQUIRE(::lstat(index_dir(cache).c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK(test::path_exists(record_path(cache, rank_key(1, 0))));
  CHECK(test::path_exists(record_path(cache, rank_key(1, 1))));

  // Records planted or left behind: a name that is no record's, a record of an entry that is
  // gone, a record that is a link (to a file outside, which stays), a component and a checkpoint
  // directory that are links, a checkpoint directory left empty.
  const std::string bucket = parent_of(record_path(cache, rank_key(1, 0)));
  const std::string component = parent_of(bucket);
  const std::string odd = bucket + "/notes.txt";
  test::write_bytes(odd, "x");
  const std::string stale = record_path(cache, rank_key(1, 9));
  test::write_bytes(stale, "");
  test::write_bytes(outside / "target", "keep me");
  const std::string link = record_path(cache, rank_key(1, 8));
  REQUIRE(::symlink((outside / "target").c_str(), link.c_str()) == 0);
  const std::string linked_component = index_dir(cache) + "/0123456789abcdef";
  REQUIRE(::symlink(outside.path().c_str(), linked_component.c_str()) == 0);
  const std::string linked_bucket = component + "/fedcba9876543210";
  REQUIRE(::symlink(outside.path().c_str(), linked_bucket.c_str()) == 0);
  const std::string empty_bucket = component + "/0011223344556677";
  REQUIRE(::mkdir(empty_bucket.c_str(), 0755) == 0);
  // And a lost record: the entry stays, its record goes.
  test::remove_path(record_path(cache, rank_key(1, 1)));

  // A miss reads none of that as an entry.
  miss = store->lookup(rank_key(1, 3));
  CHECK(miss.result == LookupResult::miss);
  CHECK(miss.reason.find(" -> 3") != std::string::npos);

  collected = collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
  REQUIRE(collected.is_ok());
  std::map<std::string, std::string> reasons;
  for (const auto& item : *collected) reasons[item.path] = item.reason;
  CHECK(reasons == std::map<std::string, std::string>{{odd, "stray file in index/"},
                                                      {stale, "index record of an entry that is gone"},
                                                      {link, "stray file in index/"},
                                                      {linked_component, "stray file in index/"},
                                                      {linked_bucket, "stray file in index/"},
                                                      {empty_bucket, "empty index directory"}});
  CHECK(test::read_bytes(outside / "target") == "keep me");
  CHECK(test::path_exists(record_path(cache, rank_key(1, 0))));
  CHECK(test::path_exists(record_path(cache, rank_key(1, 1))));  // made again
  // Eviction takes the record with the entry.
  REQUIRE(remove_entry(*store, key_id(rank_key(1, 0))).is_ok());
  CHECK_FALSE(test::path_exists(record_path(cache, rank_key(1, 0))));
}

TEST_CASE("a planted size figure is not followed, not trusted when foreign, and never written through",
          "[store][hostile][scale]") {
  // What may stand at <dir>/size (store/size_ledger.h): a link to a file elsewhere, a second name
  // of one, junk, a FIFO, a directory, a huge sparse file. Each time the publication that needs one
  // eviction measures the cache instead, evicts exactly the least recently used entry, and the
  // file elsewhere keeps its bytes and its mtime.
  const std::vector<std::string> plants = {"symlink", "hard link", "junk", "fifo", "directory", "huge"};
  for (const std::string& plant : plants) {
    DYNAMIC_SECTION(plant) {
      test::TempDir dir, outside_dir;
      const std::string cache = dir / "cache";
      auto store = old_cache(cache, 8, posix_file_system());
      const std::string figure = cache + "/" + store::kSizeFile;
      const std::string outside = outside_dir / "precious";
      {
        std::ofstream(outside) << "snapcache size 0\n";  // a figure that would let the cache outgrow
      }
      const timespec long_ago[2] = {{1'000'000'000, 0}, {1'000'000'000, 0}};
      REQUIRE(::utimensat(AT_FDCWD, outside.c_str(), long_ago, 0) == 0);
      if (plant == "symlink") REQUIRE(::symlink(outside.c_str(), figure.c_str()) == 0);
      if (plant == "hard link") REQUIRE(::link(outside.c_str(), figure.c_str()) == 0);
      if (plant == "junk") std::ofstream(figure) << "snapcache size -12\n";
      if (plant == "fifo") REQUIRE(::mkfifo(figure.c_str(), 0600) == 0);
      if (plant == "directory") {
        REQUIRE(::mkdir(figure.c_str(), 0700) == 0);
        std::ofstream(figure + "/inside") << "x";
      }
      if (plant == "huge") {
        std::ofstream(figure) << "snapcache size 0\n";
        REQUIRE(::truncate(figure.c_str(), 1ll << 30) == 0);
      }
      auto out = test::publish_raw(*store, test::store_key(1000), tiny_model(64));
      REQUIRE(out.result == PublishResult::published);
      REQUIRE(out.evicted.size() == 1);
      CHECK(out.evicted[0].id == key_id(test::store_key(0)));
      CHECK(total_bytes(*store).value() <= store->config().capacity_bytes);
      struct stat st {};
      REQUIRE(::stat(outside.c_str(), &st) == 0);
      CHECK(st.st_mtim.tv_sec == 1'000'000'000);
      std::ifstream in(outside);
      std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      CHECK(kept == "snapcache size 0\n");
      // The figure the store keeps now is its own (a regular file of one name) and right; a
      // directory holds the name until gc removes it as junk (each publication measures till then).
      if (plant == "directory") {
        auto collected = collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
        REQUIRE(collected.is_ok());
        CHECK(std::any_of(collected->begin(), collected->end(), [&](const GarbageItem& item) {
          return item.path == figure && item.reason == "a directory where size should be a file";
        }));
      }
      {
        REQUIRE(::lstat(figure.c_str(), &st) == 0);
        CHECK(S_ISREG(st.st_mode));
        CHECK(st.st_nlink == 1);
        CHECK(store::size_now(*store).value() == total_bytes(*store).value());
      }
    }
  }
}

TEST_CASE("lru/ is untrusted: gc removes what is not a record of an entry still there, and follows no link",
          "[store][hostile][scale]") {
  test::TempDir dir, outside;
  const std::string cache = dir / "cache";
  auto store = *Store::open(test::test_config(cache));
  const Key kept = test::store_key(1), gone = test::store_key(2);
  REQUIRE(test::publish_raw(*store, kept, tiny_model(64)).result == PublishResult::published);
  REQUIRE(test::publish_raw(*store, gone, tiny_model(64)).result == PublishResult::published);
  REQUIRE(remove_entry(*store, key_id(gone)));  // its record stays until something reads it
  const std::string root = cache + "/" + store::kUseOrderDir;
  auto records_named = [&](const std::string& id) {
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root))
      if (e.path().filename() == id) found.push_back(e.path().string());
    return found;
  };
  REQUIRE(records_named(key_id(kept)).size() == 1);
  REQUIRE(records_named(key_id(gone)).size() == 1);
  const std::string second = parent_of(records_named(key_id(kept))[0]);
  const std::string thousand = parent_of(second);
  const std::string precious = outside / "precious";
  std::ofstream(precious) << "keep me";
  std::ofstream(root + "/junk") << "x";
  REQUIRE(::mkdir((root + "/01").c_str(), 0700) == 0);          // not a number as the store writes one
  REQUIRE(::mkdir((thousand + "/5").c_str(), 0700) == 0);       // a second of another thousand
  const std::string forged = second + "/" + std::string(32, 'a');
  REQUIRE(::symlink(precious.c_str(), forged.c_str()) == 0);  // a link named like a record

  auto collected = collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
  REQUIRE(collected.is_ok());
  std::set<std::string> removed;
  for (const auto& item : *collected) removed.insert(item.path);
  CHECK(removed.count(root + "/junk") == 1);
  CHECK(removed.count(root + "/01") == 1);
  CHECK(removed.count(thousand + "/5") == 1);
  CHECK(removed.count(forged) == 1);
  CHECK(records_named(key_id(kept)).size() == 1);  // the record of an entry still there stays
  CHECK(records_named(key_id(gone)).empty());       // that of one gone goes
  CHECK(test::path_exists(precious));

  // lru/ itself a link to a directory elsewhere: the link goes, nothing there is listed or removed.
  test::remove_path(root);
  REQUIRE(::symlink(outside.path().c_str(), root.c_str()) == 0);
  collected = collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
  REQUIRE(collected.is_ok());
  CHECK(!test::path_exists(root));
  CHECK(test::path_exists(precious));
  // And the next publication that makes room still finds its entries (read from entries/).
  REQUIRE(test::publish_raw(*store, test::store_key(3), tiny_model(64)).result == PublishResult::published);
}
