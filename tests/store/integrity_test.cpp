// Damage is always found, named, and never reused; trust is earned by file identity.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>


#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "store/layout.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"
#include "support/fault_injection.h"

using namespace snapcache;

namespace {

PublishOptions small_chunks() {
  PublishOptions o;
  o.chunk_size = 64 * 1024;
  return o;
}

// What publication runs first: unfinished publications of dead writers and trash; no grace, no strays.
std::vector<GarbageItem> collect_dead(Store& store, DryRun dry_run) {
  return collect_garbage(store, {.dry_run = dry_run, .grace_seconds = 0, .strays = false}).value();
}

}  // namespace

TEST_CASE("a damaged byte in any chunk of the data is detected and named and the entry removed", "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel tensors = test::raw_model(11, 1);
  Key key = test::store_key(11);
  const std::string data = store->entry_path(key_id(key)) + "/data-0000.bin";
  REQUIRE(test::publish_raw(*store, key, tensors, small_chunks()).result == PublishResult::published);
  const std::uint64_t size = test::file_size(data);
  const std::uint64_t chunks = (size + 65535) / 65536;
  REQUIRE(chunks >= 8);
  for (std::uint64_t c = 0; c < chunks; ++c) {
    if (c > 0) REQUIRE(test::publish_raw(*store, key, tensors, small_chunks()).result == PublishResult::published);
    std::uint64_t offset = std::min(size - 1, c * 65536 + (c * 977) % 65536);
    test::flip_byte(data, offset);
    auto loaded = store->lookup(key);
    INFO("chunk " << c << " offset " << offset << ": " << loaded.reason);
    CHECK(loaded.result == LookupResult::damaged);
    CHECK(loaded.reason.find("chunk " + std::to_string(c)) != std::string::npos);
    CHECK(!loaded.snapshot);
    CHECK_FALSE(test::path_exists(store->entry_path(key_id(key))));
  }
}

TEST_CASE("damage names the tensor that holds the byte", "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel tensors = test::raw_model(12, 1);
  Key key = test::store_key(12);
  PublishOptions page_chunks;
  page_chunks.chunk_size = 4096;  // one chunk per page: storages are page-aligned, so exact naming
  REQUIRE(test::publish_raw(*store, key, tensors, page_chunks).result == PublishResult::published);
  auto snap = store->lookup(key).snapshot;
  REQUIRE(snap);
  const auto& m = snap->manifest();
  // The storage of "norm.weight".
  std::uint64_t offset = 0;
  for (const auto& t : m.tensors)
    if (t.name == "norm.weight") offset = m.storages[t.storage].offset + 10;
  snap.reset();
  test::flip_byte(store->entry_path(key_id(key)) + "/data-0000.bin", offset);
  auto report = verify_entry(*store, key_id(key));
  CHECK(report.status.code() == StatusCode::damaged);
  REQUIRE(report.damaged_chunks.size() == 1);
  CHECK(report.damaged_chunks[0].tensors == std::vector<std::string>{"norm.weight"});
  CHECK(report.status.message().find("norm.weight") != std::string::npos);
}

TEST_CASE("every byte of the manifest is covered by a check", "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel tensors;
  tensors.storages = {std::vector<std::byte>(32, std::byte{0x3f})};
  tensors.tensors = {{"w", DType::float32, {8}, {1}, 0, 0}};
  Key key = test::store_key(13);
  const std::string manifest = store->entry_path(key_id(key)) + "/manifest.snap";
  REQUIRE(test::publish_raw(*store, key, tensors).result == PublishResult::published);
  const std::uint64_t size = test::file_size(manifest);
  for (std::uint64_t i = 0; i < size; ++i) {
    if (i > 0) REQUIRE(test::publish_raw(*store, key, tensors).result == PublishResult::published);
    test::flip_byte(manifest, i);
    auto loaded = store->lookup(key);
    INFO("manifest byte " << i << ": " << loaded.reason);
    REQUIRE(loaded.result == LookupResult::damaged);
  }
}

TEST_CASE("a truncated, extended or missing data file and manifest or lease is damage and not a crash - "
          "verify, the listing and a load agree",
          "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel tensors = test::raw_model(14);
  Key key = test::store_key(14);
  const std::string entry = store->entry_path(key_id(key));
  for (const char* what :
       {"truncate-data", "extend-data", "remove-data", "remove-manifest", "truncate-manifest", "remove-lease"}) {
    REQUIRE(test::publish_raw(*store, key, tensors).result == PublishResult::published);
    std::string w = what;
    if (w == "truncate-data") test::resize_file(entry + "/data-0000.bin", 4096);
    if (w == "remove-data") test::remove_path(entry + "/data-0000.bin");
    if (w == "remove-manifest") test::remove_path(entry + "/manifest.snap");
    if (w == "truncate-manifest") test::resize_file(entry + "/manifest.snap", 40);
    if (w == "extend-data") test::resize_file(entry + "/data-0000.bin", test::file_size(entry + "/data-0000.bin") + 4096);
    if (w == "remove-lease") test::remove_path(entry + "/lease");
    INFO(what);
    auto info = entry_info(*store, key_id(key));
    REQUIRE(info.is_ok());
    CHECK(info->state == EntryState::damaged);
    CHECK_FALSE(info->identity_trusted);
    auto report = verify_entry(*store, key_id(key));
    CHECK(is_entry_damage(report.status.code()));
    CHECK(report.status.message() == info->problem);
    auto loaded = store->lookup(key);
    INFO(loaded.reason);
    CHECK(loaded.result == LookupResult::damaged);
    CHECK(loaded.reason.find(info->problem) != std::string::npos);
    CHECK_FALSE(test::path_exists(entry));
  }
}

TEST_CASE("unchanged data files are trusted without reading and changed identity triggers a rehash", "[store][integrity]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  test::RawModel tensors = test::raw_model(15, 4);
  Key key = test::store_key(15);
  REQUIRE(test::publish_raw(*store, key, tensors).result == PublishResult::published);
  const std::string data = store->entry_path(key_id(key)) + "/data-0000.bin";
  const std::uint64_t size = test::file_size(data);

  fs->reset_counters();
  auto first = store->lookup(key);
  REQUIRE(first.result == LookupResult::hit);
  CHECK_FALSE(first.rehashed);
  CHECK(fs->bytes_read() < 64 * 1024);  // the manifest, not the data
  CHECK(test::same_data(*first.snapshot, tensors));

  // Same bytes, new identity (as after a copy or restore): rehash, then trust again.
  test::set_age(data, 3600);
  fs->reset_counters();
  auto second = store->lookup(key);
  REQUIRE(second.result == LookupResult::hit);
  CHECK(second.rehashed);
  CHECK(fs->bytes_read() >= size);
  CHECK(second.bytes_hashed == size);

  fs->reset_counters();
  auto third = store->lookup(key);
  REQUIRE(third.result == LookupResult::hit);
  CHECK_FALSE(third.rehashed);
  CHECK(fs->bytes_read() < 64 * 1024);

  fs->reset_counters();
  auto forced = store->lookup(key, VerifyPolicy::always_rehash);
  REQUIRE(forced.result == LookupResult::hit);
  CHECK(fs->bytes_read() >= size);
}

TEST_CASE("an entry removed while verify or a load checks it is gone, never damage, and nothing is repaired",
          "[store][integrity][race]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  Key key = test::store_key(18);
  const std::string id = key_id(key);
  const std::string entry = store->entry_path(id);
  for (const char* who : {"verify", "load"}) {
    INFO(who);
    REQUIRE(test::publish_raw(*store, key, test::raw_model(18)).result == PublishResult::published);
    // What an eviction or a quarantine does (one rename of the whole entry), right after the
    // check read the manifest: the lease and data files then seem missing.
    const std::string moved = dir.path() + "/trash/" + id + ".test-" + who;
    fs->after_open("manifest.snap", [&] { test::rename_path(entry, moved); });
    if (std::string(who) == "verify") {
      auto report = verify_entry(*store, id);
      INFO(report.status.to_string());
      CHECK(report.status.code() == StatusCode::not_found);
      CHECK_FALSE(is_entry_damage(report.status.code()));
    } else {
      auto loaded = store->lookup(key);
      INFO(loaded.reason);
      CHECK(loaded.result == LookupResult::miss);
    }
    fs->clear_faults();
    // The entry that was moved is whole: nothing called it damaged or removed its files.
    CHECK(test::path_exists(moved + "/lease"));
    CHECK(test::path_exists(moved + "/data-0000.bin"));
  }
}

TEST_CASE("verify skips an entry being evicted and never evicts it meanwhile", "[store][integrity][race]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  Key key = test::store_key(19);
  const std::string id = key_id(key);
  REQUIRE(test::publish_raw(*store, key, test::raw_model(19)).result == PublishResult::published);
  {
    // An evictor between taking its lock and renaming the entry away.
    auto evictor = store::take_lease(store->fs(), store->entry_path(id), LockMode::exclusive);
    REQUIRE(evictor.is_ok());
    auto report = verify_entry(*store, id);
    CHECK(report.status.code() == StatusCode::busy);
    CHECK_FALSE(is_entry_damage(report.status.code()));
  }
  // While verify rehashes, it holds a lease as a load does: an eviction then skips the entry.
  bool evicted_meanwhile = false;
  auto report = verify_entry(*store, id, [&](std::uint64_t) {
    if (remove_entry(*store, id).is_ok()) evicted_meanwhile = true;
  });
  CHECK(report.status.is_ok());
  CHECK_FALSE(evicted_meanwhile);
  CHECK(test::path_exists(store->entry_path(id)));
}

TEST_CASE("evict reports a cache it cannot write as failures, not as entries in use", "[store][evict]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  Key key = test::store_key(20);
  REQUIRE(test::publish_raw(*store, key, test::raw_model(20)).result == PublishResult::published);
  Fault read_only;
  read_only.op = FsOp::rename;
  read_only.sys_errno = EROFS;
  read_only.times = -1;
  fs->inject(read_only);
  EvictRequest everything;
  everything.all = true;
  auto out = evict(*store, everything);
  REQUIRE(out.is_ok());
  CHECK(out->evicted.empty());
  CHECK(out->skipped.empty());
  REQUIRE(out->failed.size() == 1);
  CHECK(out->failed[0].first == key_id(key));
  CHECK(out->failed[0].second.code() == StatusCode::read_only);
  fs->clear_faults();
  CHECK(test::path_exists(store->entry_path(key_id(key))));
}

TEST_CASE("unfinished publications are never used and are collected once their writer is gone", "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  Key key = test::store_key(16);
  const std::string id = key_id(key);
  // What a writer killed before its commit leaves: a complete-looking entry in tmp/.
  REQUIRE(test::publish_raw(*store, key, test::raw_model(16)).result == PublishResult::published);
  const std::string tmp = dir.path() + "/tmp/" + id + ".12345-0-deadbeef";
  test::rename_path(store->entry_path(id), tmp);
  auto loaded = store->lookup(key);
  CHECK(loaded.result == LookupResult::miss);
  auto listed = list_entries(*store).value();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].state == EntryState::unfinished);
  auto removed = collect_dead(*store, DryRun::yes);
  CHECK(removed.size() == 1);
  CHECK(test::path_exists(tmp));
  removed = collect_dead(*store, DryRun::no);
  CHECK(removed.size() == 1);
  CHECK_FALSE(test::path_exists(tmp));
}
