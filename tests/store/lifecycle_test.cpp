// Capacity, reserved free space, LRU eviction, switching the cache off.
#include <cerrno>
#include <filesystem>
#include <thread>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/text.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"
#include "support/fault_injection.h"
#include "util/file_io.h"

using namespace snapcache;

namespace {

// A FileSystem that reports a chosen amount of free disk; with `holds` set, a disk of `free_`
// bytes that holds that folder, so removing files there frees room as on a real disk.
class SmallDisk final : public FileSystemWrapper {
 public:
  explicit SmallDisk(std::uint64_t free) : FileSystemWrapper(posix_file_system()), free_(free) {}
  std::uint64_t free_;
  std::string holds;
  Result<SpaceInfo> space(const std::string&) override {
    std::uint64_t used = 0;
    if (!holds.empty())
      for (const auto& f : std::filesystem::recursive_directory_iterator(holds))
        if (f.is_regular_file()) used += f.file_size();
    return SpaceInfo{free_ * 2, free_ - std::min(free_, used)};
  }
};

// What a raw_model(1, mib) entry takes in a cache, measured on one.
std::uint64_t entry_size(std::size_t mib) {
  test::TempDir scratch;
  auto store = *Store::open(test::test_config(scratch.path()));
  REQUIRE(test::publish_raw(*store, test::store_key(1), test::raw_model(1, mib)).result == PublishResult::published);
  return total_bytes(*store).value();
}

void age_apart() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

}  // namespace

TEST_CASE("publication evicts least-recently-used entries to stay under capacity", "[store][capacity]") {
  test::TempDir dir;
  Config config = test::test_config(dir.path());
  config.capacity_bytes = 7ull << 19;  // 3.5 MiB: room for two ~1.4 MiB entries, not three
  auto store = *Store::open(config);
  for (int seed : {1, 2}) {
    REQUIRE(test::publish_raw(*store, test::store_key(seed), test::raw_model(seed, 2)).result ==
            PublishResult::published);
    age_apart();
  }
  // Use entry 1, so entry 2 is now the least recently used.
  REQUIRE(store->lookup(test::store_key(1)).result == LookupResult::hit);
  age_apart();
  auto third = test::publish_raw(*store, test::store_key(3), test::raw_model(3, 2));
  REQUIRE(third.result == PublishResult::published);
  REQUIRE(third.evicted.size() == 1);
  CHECK(third.evicted[0].id == key_id(test::store_key(2)));
  CHECK(third.evicted[0].component == "dit");
  CHECK(third.evicted[0].bytes > (1u << 20));
  CHECK(describe_evictions(third.evicted) ==
        "evicted 1 entry (" + format_size(third.evicted[0].bytes) + ") to make room: " +
            key_id(test::store_key(2)).substr(0, 12) + " (dit, " + format_size(third.evicted[0].bytes) + ")");
  CHECK(total_bytes(*store).value() <= config.capacity_bytes);
  CHECK(store->lookup(test::store_key(1)).result == LookupResult::hit);
  CHECK(store->lookup(test::store_key(2)).result == LookupResult::miss);
}

TEST_CASE("leased entries are never evicted and a publication that cannot fit is skipped with the reason",
          "[store][capacity]") {
  test::TempDir dir;
  Config config = test::test_config(dir.path());
  config.capacity_bytes = 7ull << 19;
  auto store = *Store::open(config);
  REQUIRE(test::publish_raw(*store, test::store_key(1), test::raw_model(1, 2)).result == PublishResult::published);
  REQUIRE(test::publish_raw(*store, test::store_key(2), test::raw_model(2, 2)).result == PublishResult::published);
  auto held1 = store->lookup(test::store_key(1));
  auto held2 = store->lookup(test::store_key(2));
  REQUIRE(held2.result == LookupResult::hit);
  test::RawModel third = test::raw_model(3, 2);
  auto out = test::publish_raw(*store, test::store_key(3), third);
  CHECK(out.result == PublishResult::skipped);
  CHECK(out.status.code() == StatusCode::no_space);
  CHECK(out.status.message().find("2 leased entries could not be evicted") != std::string::npos);
  CHECK(third.storages == test::raw_model(3, 2).storages);  // the caller keeps its bytes
  held2 = {};  // release one lease: now it can go
  out = test::publish_raw(*store, test::store_key(3), third);
  CHECK(out.result == PublishResult::published);
  REQUIRE(out.evicted.size() == 1);
  CHECK(out.evicted[0].id == key_id(test::store_key(2)));
}

TEST_CASE("a publication that cannot fit even after every eviction it could make evicts nothing",
          "[store][capacity]") {
  const std::uint64_t small = entry_size(2), big = entry_size(8);
  test::TempDir dir;
  Config config = test::test_config(dir.path());
  config.capacity_bytes = big + small / 2;  // two small entries, or one big one
  REQUIRE(2 * small <= config.capacity_bytes);
  auto store = *Store::open(config);
  REQUIRE(test::publish_raw(*store, test::store_key(1), test::raw_model(1, 2)).result == PublishResult::published);
  age_apart();
  REQUIRE(test::publish_raw(*store, test::store_key(2), test::raw_model(2, 2)).result == PublishResult::published);
  auto held = store->lookup(test::store_key(2));
  REQUIRE(held.result == LookupResult::hit);
  // Entry 1 is evictable, entry 2 is leased: with 2 staying, the big entry can never fit.
  auto out = test::publish_raw(*store, test::store_key(3), test::raw_model(3, 8));
  CHECK(out.result == PublishResult::skipped);
  CHECK(out.status.code() == StatusCode::no_space);
  CHECK(out.status.message().find("1 leased entries could not be evicted") != std::string::npos);
  CHECK(out.status.message().find("nothing was evicted for it") != std::string::npos);
  CHECK(out.evicted.empty());
  CHECK(store->lookup(test::store_key(1)).result == LookupResult::hit);  // still there
  // Once the lease is let go the plan frees both, and evicts both.
  held = {};
  auto again = test::publish_raw(*store, test::store_key(3), test::raw_model(3, 8));
  CHECK(again.result == PublishResult::published);
  CHECK(again.evicted.size() == 2);
}

TEST_CASE("a publication the disk cannot hold even after evicting every entry evicts nothing", "[store][capacity]") {
  const std::uint64_t small = entry_size(2), big = entry_size(8);
  REQUIRE(small > big / 4);
  test::TempDir dir;
  Config config = test::test_config(dir.path());
  auto disk = std::make_shared<SmallDisk>(small + big / 2);  // the small entry, then half the big one
  disk->holds = dir.path();
  auto store = *Store::open(config, disk);
  REQUIRE(test::publish_raw(*store, test::store_key(1), test::raw_model(1, 2)).result == PublishResult::published);
  auto out = test::publish_raw(*store, test::store_key(2), test::raw_model(2, 8));
  CHECK(out.result == PublishResult::skipped);
  CHECK(out.status.message().find("must stay free; nothing was evicted for it") != std::string::npos);
  CHECK(store->lookup(test::store_key(1)).result == LookupResult::hit);
  // A disk that holds the big entry once the small one is gone: it goes, and the publication lands.
  disk->free_ = big + big / 4;
  auto fits = test::publish_raw(*store, test::store_key(2), test::raw_model(2, 8));
  CHECK(fits.result == PublishResult::published);
  CHECK(fits.evicted.size() == 1);
}

TEST_CASE("an entry larger than the capacity is skipped and says so", "[store][capacity]") {
  test::TempDir dir;
  Config config = test::test_config(dir.path());
  config.capacity_bytes = 1ull << 20;
  auto store = *Store::open(config);
  auto out = test::publish_raw(*store, test::store_key(1), test::raw_model(1, 2));
  CHECK(out.result == PublishResult::skipped);
  CHECK(out.status.message().find("more than the cache capacity") != std::string::npos);
  CHECK(list_entries(*store).value().empty());
}

TEST_CASE("a publication skipped for capacity names what set the capacity", "[store][capacity][config]") {
  test::TempDir dir;
  Config config = test::test_config(dir.path());
  config.capacity_bytes = 1ull << 20;
  config.sources["capacity"] = ConfigSource::flag;
  config.flags["capacity"] = "--capacity-gib";  // as the demo sets it
  auto by_flag = test::publish_raw(**Store::open(config), test::store_key(1), test::raw_model(1, 2));
  CHECK(by_flag.result == PublishResult::skipped);
  CHECK(by_flag.status.message().find("set by --capacity-gib") != std::string::npos);
  CHECK(by_flag.status.message().find("SNAPCACHE_CAPACITY_GIB") == std::string::npos);

  config.sources["capacity"] = ConfigSource::environment;
  auto by_variable = test::publish_raw(**Store::open(config), test::store_key(1), test::raw_model(1, 2));
  CHECK(by_variable.status.message().find("set by SNAPCACHE_CAPACITY_GIB") != std::string::npos);
}

TEST_CASE("a store for loading never fails: a cache that cannot be used falls back with the reason",
          "[store][unavailable]") {
  test::TempDir dir;
  const std::string cache = dir.path() + "/cache";
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  Fault read_only;  // the cache directory cannot be made: a read-only file system
  read_only.op = FsOp::make_directory;
  read_only.sys_errno = EROFS;
  read_only.times = -1;
  fs->inject(read_only);
  CHECK_FALSE(Store::open(test::test_config(cache), fs).is_ok());  // for the command: an error

  std::shared_ptr<Store> store = Store::open_for_loading(test::test_config(cache), fs);
  REQUIRE(store != nullptr);
  INFO(store->unavailable_reason());
  CHECK(store->unavailable_reason().find("Read-only file system") != std::string::npos);
  fs->reset_counters();
  auto looked = store->lookup(test::store_key(2));
  CHECK(looked.result == LookupResult::fallback);
  CHECK(looked.reason == store->unavailable_reason());
  auto published = test::publish_raw(*store, test::store_key(2), test::raw_model(2));
  CHECK(published.result == PublishResult::skipped);
  CHECK(published.status.message() == store->unavailable_reason());
  CHECK(fs->calls(FsOp::open) + fs->calls(FsOp::stat) + fs->calls(FsOp::make_directory) == 0);  // no disk
  CHECK_FALSE(test::path_exists(cache));

  // Invalid settings: the same, with the settings' reason.
  auto invalid = Store::open_for_loading(Status(StatusCode::invalid_argument, "SNAPCACHE_CAPACITY_GIB: '0x10' is not a number of GiB"));
  CHECK(invalid->unavailable_reason().find("0x10") != std::string::npos);
  CHECK(invalid->lookup(test::store_key(2)).result == LookupResult::fallback);
}

TEST_CASE("a cache on a read-only file system still serves its entries and publishes nothing",
          "[store][unavailable]") {
  test::TempDir dir;
  Key key = test::store_key(3);
  test::RawModel tensors = test::raw_model(3);
  REQUIRE(test::publish_raw(**Store::open(test::test_config(dir.path())), key, tensors).result ==
          PublishResult::published);
  // What a read-only mount refuses: every new file or directory, rename and removal. (Creating
  // entries/, tmp/ and trash/ again gives EEXIST there, as it does here.)
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  for (FsOp op : {FsOp::rename, FsOp::pwrite, FsOp::remove_file, FsOp::remove_directory, FsOp::touch, FsOp::allocate}) {
    Fault f;
    f.op = op;
    f.sys_errno = EROFS;
    f.times = -1;
    fs->inject(f);
  }
  for (FsOp op : {FsOp::open, FsOp::make_directory}) {
    Fault f;
    f.op = op;
    f.sys_errno = EROFS;
    f.times = -1;
    f.path_contains = dir.path() + "/tmp/";
    fs->inject(f);
  }
  std::shared_ptr<Store> store = Store::open_for_loading(test::test_config(dir.path()), fs);
  CHECK(store->unavailable_reason().empty());
  auto hit = store->lookup(key);
  INFO(hit.reason);
  REQUIRE(hit.result == LookupResult::hit);
  CHECK(test::same_data(*hit.snapshot, tensors));
  auto other = test::publish_raw(*store, test::store_key(4), test::raw_model(4));
  CHECK(other.result != PublishResult::published);
  CHECK(other.status.code() == StatusCode::read_only);
  CHECK(store->lookup(key).result == LookupResult::hit);
}

TEST_CASE("a publication leaves the reserved free disk space", "[store][capacity]") {
  test::TempDir dir;
  Config config = test::test_config(dir.path());
  config.reserve_free_bytes = 1ull << 30;
  auto disk = std::make_shared<SmallDisk>((1ull << 30) + (1ull << 20));  // 1 GiB + 1 MiB free
  auto store = *Store::open(config, disk);
  auto out = test::publish_raw(*store, test::store_key(1), test::raw_model(1, 2));
  CHECK(out.result == PublishResult::skipped);
  CHECK(out.status.message().find("must stay free") != std::string::npos);
  disk->free_ = 2ull << 30;
  CHECK(test::publish_raw(*store, test::store_key(1), test::raw_model(1, 2)).result == PublishResult::published);
}

TEST_CASE("a disabled cache touches no disk and says why", "[store][config]") {
  test::TempDir dir;
  Config config = test::test_config(dir.path() + "/cache");
  config.mode = CacheMode::disabled;
  auto store = *Store::open(config);
  auto out = test::publish_raw(*store, test::store_key(1), test::raw_model(1));
  CHECK(out.result == PublishResult::skipped);
  CHECK(out.status.code() == StatusCode::disabled);
  auto loaded = store->lookup(test::store_key(1));
  CHECK(loaded.result == LookupResult::disabled);
  CHECK(loaded.reason.find("disabled") != std::string::npos);
  CHECK_FALSE(test::path_exists(dir.path() + "/cache"));
}

TEST_CASE("a miss names the key fields that differ from the nearest entry", "[store][key]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  REQUIRE(test::publish_raw(*store, test::store_key(1), test::raw_model(1)).result == PublishResult::published);
  Key other = test::store_key(1);
  other.torch.version = "2.10.0";
  auto loaded = store->lookup(other);
  CHECK(loaded.result == LookupResult::miss);
  CHECK(loaded.reason.find("torch " + test::store_key(1).torch.version + " -> 2.10.0") != std::string::npos);
  CHECK(loaded.reason.find(key_id(test::store_key(1)).substr(0, 12)) != std::string::npos);
}

TEST_CASE("the nearest entry is one of the same component and checkpoint, even when another differs in fewer "
          "fields, and without one a miss is that model's first load",
          "[store][key]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  Key wanted = test::store_key(1, "dit");
  Key other_component = wanted;  // differs only in its component: one field
  other_component.component = "vae";
  Key same_component = wanted;  // differs in two fields
  same_component.dtype = "float16";
  same_component.precision_policy = "none";
  // Published in both orders, so the answer cannot depend on the order entries are listed in.
  for (bool vae_first : {true, false}) {
    test::TempDir cache;
    auto s = *Store::open(test::test_config(cache.path()));
    for (const Key& k : vae_first ? std::vector<Key>{other_component, same_component}
                                  : std::vector<Key>{same_component, other_component})
      REQUIRE(test::publish_raw(*s, k, test::raw_model(1)).result == PublishResult::published);
    auto nearest = nearest_entry(*s, wanted);
    REQUIRE(nearest);
    INFO("vae first: " << vae_first);
    CHECK(nearest->id == key_id(same_component));
    CHECK(nearest->differences.size() == 2);
    auto missed = s->lookup(wanted);
    CHECK(missed.result == LookupResult::miss);
    CHECK(missed.reason.find(key_id(same_component).substr(0, 12)) != std::string::npos);
  }
  CHECK_FALSE(nearest_entry(*store, wanted));  // an empty cache has nothing to compare with

  // Another model on the same files, and this model from another checkpoint: neither explains a
  // miss of this one, which is its first load.
  Key elsewhere = wanted;
  elsewhere.checkpoint[0].path = "/elsewhere/model.safetensors";
  for (const Key& k : {other_component, elsewhere})
    REQUIRE(test::publish_raw(*store, k, test::raw_model(1)).result == PublishResult::published);
  CHECK_FALSE(nearest_entry(*store, wanted));
  const LookupOutcome first = store->lookup(wanted);
  CHECK(first.result == LookupResult::miss);
  CHECK(first.reason == "no entry of component 'dit' for this checkpoint yet: this model's first load");
}

TEST_CASE("publishing an existing key is a no-op that reports it", "[store]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  REQUIRE(test::publish_raw(*store, test::store_key(1), test::raw_model(1)).result == PublishResult::published);
  CHECK(test::publish_raw(*store, test::store_key(1), test::raw_model(1)).result == PublishResult::already_present);
}

TEST_CASE("garbage collection reports a directory it cannot list instead of finding nothing", "[store][gc]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  REQUIRE(collect_garbage(*store, {}).is_ok());
  fs->inject({FsOp::list_directory, EACCES, 0, -1, false, "/trash"});
  auto collected = collect_garbage(*store, {});
  CHECK(fs->faults_fired() >= 1);
  REQUIRE_FALSE(collected.is_ok());
  CHECK(collected.status().code() == StatusCode::permission_denied);
  CHECK(collected.status().message().find("trash") != std::string::npos);
}

TEST_CASE("garbage collection that cannot list a directory has removed nothing it does not report", "[store][gc]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  // A dead writer's leftover: its lease marked as taken, and nobody holds it.
  const std::string dead = dir.path() + "/tmp/" + std::string(32, 'd') + ".1-0-dead";
  REQUIRE(make_directories(*posix_file_system(), dead).is_ok());
  test::write_bytes(dead + "/lease", "L");
  test::set_age(dead, 2 * 3600);
  REQUIRE(make_directories(*posix_file_system(), dir.path() + "/misses").is_ok());
  fs->inject({FsOp::list_directory, EACCES, 0, -1, false, "/misses"});
  auto collected = collect_garbage(*store, {});
  CHECK(fs->faults_fired() >= 1);
  REQUIRE_FALSE(collected.is_ok());
  CHECK(collected.status().message().find("misses") != std::string::npos);
  CHECK(test::path_exists(dead));  // it was removed, and the failure was all that was said
  fs->clear_faults();
  collected = collect_garbage(*store, {});
  REQUIRE(collected.is_ok());
  REQUIRE(collected->size() == 1);
  CHECK((*collected)[0].path == dead);
  CHECK_FALSE(test::path_exists(dead));
}
