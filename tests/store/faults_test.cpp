// Every storage failure, at every operation, ends in a clean outcome: the publication fails or is
// skipped with the reason, nothing half-written is ever used, and a later load is a miss or an
// exact hit.
#include <cerrno>
#include <set>
#include <string>
#include <vector>

#include "snapcache/extend/store_access.h"
#include "snapcache/maintenance.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"
#include "support/fault_injection.h"

using namespace snapcache;

namespace {

std::size_t entries_in(const std::string& dir) { return test::count_entries(dir + "/entries", true); }
std::size_t tmp_in(const std::string& dir) { return test::count_entries(dir + "/tmp"); }

// Whether a call at `path` kept the cache's records: stats.json (under a lock on the cache
// directory itself, which nothing else locks), misses/, index/, lru/ or the size figure. A fault
// there loses a count, an explanation or an order (the size is then measured, the order read from
// the entries), never an entry.
bool is_record_keeping(const std::string& path, const std::string& cache) {
  return path == cache || path.find("/stats.json") != std::string::npos || path.find("/misses") != std::string::npos ||
         path.find("/index") != std::string::npos || path.find("/lru") != std::string::npos ||
         path == cache + "/size" || path.starts_with(cache + "/size.tmp.");
}

}  // namespace

namespace {

// How often a clean publication of `model` calls `op`: the calls a fault can be injected into.
std::uint64_t calls_in_clean_publication(FsOp op, const test::RawModel& model, const PublishOptions& options) {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  fs->reset_counters();
  REQUIRE(test::publish_raw(*store, test::store_key(21), model, options).result == PublishResult::published);
  return fs->calls(op);
}

}  // namespace

TEST_CASE("a fault at any operation of a publication leaves no entry and no debris", "[store][faults]") {
  const std::vector<int> errnos = {ENOSPC, EIO, EROFS, EACCES, EDQUOT};
  const std::vector<FsOp> ops = {FsOp::open, FsOp::pwrite, FsOp::fsync, FsOp::fsync_directory, FsOp::allocate,
                                 FsOp::rename, FsOp::make_directory, FsOp::stat, FsOp::fstat, FsOp::space,
                                 FsOp::lock, FsOp::list_directory};
  test::RawModel tensors = test::raw_model(21, 1);
  PublishOptions options;
  options.chunk_size = 128 * 1024;
  for (FsOp op : ops) {
    // Every one of these goes through the FileSystem seam; a publication that stopped doing so
    // would escape the faults below.
    const std::uint64_t calls = calls_in_clean_publication(op, tensors, options);
    INFO(to_string(op) << ": " << calls << " calls in a clean publication");
    REQUIRE(calls > 0);
    // Fail the first, a middle and the last call of this operation.
    std::set<int> skips = {0, static_cast<int>(calls / 2), static_cast<int>(calls - 1)};
    for (int err : errnos) {
      for (int skip : skips) {
        test::TempDir dir;
        auto fs = std::make_shared<FaultInjectingFileSystem>();
        auto store = *Store::open(test::test_config(dir.path()), fs);
        fs->inject({op, err, skip, 1, false, ""});
        auto out = test::publish_raw(*store, test::store_key(21), tensors, options);
        INFO(to_string(op) << " errno " << err << " skip " << skip << ": " << to_string(out.result) << " "
                           << out.status.to_string());
        REQUIRE(fs->faults_fired() == 1);
        fs->clear_faults();
        if (out.result == PublishResult::published) {
          // Only faults the publication may survive (after the commit, or in best-effort
          // housekeeping: the records kept beside the entries) leave a published entry, and then a
          // whole one.
          INFO("the fault fired at " << fs->last_fired_path());
          CHECK((op == FsOp::fsync_directory || op == FsOp::list_directory || op == FsOp::stat ||
                 is_record_keeping(fs->last_fired_path(), store->config().directory)));
        } else {
          CHECK((out.result == PublishResult::failed || out.result == PublishResult::skipped));
          CHECK_FALSE(out.status.is_ok());
          CHECK(entries_in(dir.path()) == 0);
        }
        CHECK(tmp_in(dir.path()) == 0);
        auto loaded = store->lookup(test::store_key(21));
        if (loaded.result == LookupResult::hit) CHECK(test::same_data(*loaded.snapshot, tensors));
        else CHECK(loaded.result == LookupResult::miss);
      }
    }
  }
}

TEST_CASE("short writes are completed and not mistaken for success or failure", "[store][faults]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  fs->inject({FsOp::pwrite, 0, 0, -1, true, ""});  // every write transfers half
  test::RawModel tensors = test::raw_model(22, 1);
  auto out = test::publish_raw(*store, test::store_key(22), tensors);
  INFO(out.status.to_string());
  REQUIRE(out.result == PublishResult::published);
  CHECK(fs->faults_fired() > 10);
  fs->clear_faults();
  auto loaded = store->lookup(test::store_key(22), VerifyPolicy::always_rehash);
  REQUIRE(loaded.result == LookupResult::hit);
  CHECK(test::same_data(*loaded.snapshot, tensors));
}

TEST_CASE("a fault at any operation of a load falls back without reusing or losing a good entry", "[store][faults]") {
  const std::vector<FsOp> ops = {FsOp::open, FsOp::pread, FsOp::stat, FsOp::fstat, FsOp::map, FsOp::lock};
  test::RawModel tensors = test::raw_model(23, 1);
  for (FsOp op : ops) {
    for (int err : {EIO, EACCES, ENOMEM}) {
      test::TempDir dir;
      auto fs = std::make_shared<FaultInjectingFileSystem>();
      auto store = *Store::open(test::test_config(dir.path()), fs);
      REQUIRE(test::publish_raw(*store, test::store_key(23), tensors).result == PublishResult::published);
      fs->inject({op, err, 0, 1, false, ""});
      auto loaded = store->lookup(test::store_key(23), VerifyPolicy::always_rehash);
      INFO(to_string(op) << " errno " << err << ": " << to_string(loaded.result) << " " << loaded.reason);
      REQUIRE(fs->faults_fired() == 1);  // a load goes through the seam for each of these
      CHECK(loaded.result != LookupResult::hit);
      CHECK(!loaded.snapshot);
      CHECK((loaded.result == LookupResult::fallback || loaded.result == LookupResult::miss));
      // An I/O failure is not damage: the good entry survives and the next load hits.
      fs->clear_faults();
      auto again = store->lookup(test::store_key(23));
      REQUIRE(again.result == LookupResult::hit);
      CHECK(test::same_data(*again.snapshot, tensors));
    }
  }
}

TEST_CASE("the records beside the entries go through the store's file system, and a fault there costs no load",
          "[store][faults]") {
  // Each of the cache's records with the calls that keep it: a fault in every one of them must fire
  // (the record goes through the seam a wrapper is given) and change no outcome.
  struct Record {
    std::string path;
    std::vector<FsOp> ops;
  };
  const std::vector<Record> records = {
      {"/stats.json", {FsOp::open, FsOp::fstat, FsOp::pread, FsOp::pwrite, FsOp::rename}},
      {"/misses", {FsOp::make_directory, FsOp::stat, FsOp::open, FsOp::pwrite, FsOp::rename, FsOp::list_directory}},
      {"/index", {FsOp::make_directory, FsOp::stat, FsOp::open, FsOp::open_directory, FsOp::remove_file,
                  FsOp::remove_directory}},
  };
  const test::RawModel model = test::raw_model(24, 1);
  const Key key = test::store_key(24);
  const Key other = test::store_key(25);
  for (const Record& record : records) {
    for (FsOp op : record.ops) {
      INFO(record.path << ": every " << to_string(op) << " fails");
      test::TempDir dir;
      auto fs = std::make_shared<FaultInjectingFileSystem>();
      auto store = *Store::open(test::test_config(dir.path()), fs);
      fs->inject({op, EIO, 0, -1, false, store->config().directory + record.path});
      // A publication, a hit, a miss (recorded, explained by the index) and an eviction.
      CHECK(test::publish_raw(*store, key, model).result == PublishResult::published);
      {
        auto hit = store->lookup(key, VerifyPolicy::always_rehash);  // its lease goes with it
        REQUIRE(hit.result == LookupResult::hit);
        CHECK(test::same_data(*hit.snapshot, model));
      }
      CHECK(store->lookup(other).result == LookupResult::miss);
      EvictRequest request;
      request.ids = {key_id(key)};
      auto evicted = evict(*store, request);
      REQUIRE(evicted.is_ok());
      CHECK(evicted->evicted == std::vector<std::string>{key_id(key)});
      CHECK(fs->faults_fired() > 0);
      fs->clear_faults();
      CHECK(store->lookup(key).result == LookupResult::miss);
    }
  }
}

TEST_CASE("a read-only cache directory falls back cleanly", "[store][faults]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  for (FsOp op : {FsOp::make_directory, FsOp::open, FsOp::rename}) fs->inject({op, EROFS, 0, -1, false, ""});
  auto out = test::publish_raw(*store, test::store_key(24), test::raw_model(24));
  CHECK(out.result == PublishResult::failed);
  CHECK(out.status.code() == StatusCode::read_only);
  auto loaded = store->lookup(test::store_key(24));
  CHECK((loaded.result == LookupResult::miss || loaded.result == LookupResult::fallback));
}
