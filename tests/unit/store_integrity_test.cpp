// Damage is always found, named, and never reused; trust is earned by file identity.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/Functions.h>


#include "snapcache/snapshot.h"
#include "store/layout.h"
#include "support/catch.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"
#include "util/fault_injection.h"

using namespace snapcache;

namespace {

PublishOptions small_chunks() {
  PublishOptions o;
  o.chunk_size = 64 * 1024;
  return o;
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  unsigned char c = 0;
  REQUIRE(::pread(fd, &c, 1, static_cast<off_t>(offset)) == 1);
  c ^= 0x01;
  REQUIRE(::pwrite(fd, &c, 1, static_cast<off_t>(offset)) == 1);
  ::close(fd);
}

}  // namespace

TEST_CASE("a damaged byte in any chunk of the data is detected and named and the entry removed", "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  NamedTensors tensors = test::model_tensors(11, 1);
  Key key = test::test_key(11);
  const std::string data = store->entry_path(key_id(key)) + "/data-0000.bin";
  REQUIRE(publish_tensors(*store, key, tensors, small_chunks()).result == PublishResult::published);
  const std::uint64_t size = test::file_size(data);
  const std::uint64_t chunks = (size + 65535) / 65536;
  REQUIRE(chunks >= 8);
  for (std::uint64_t c = 0; c < chunks; ++c) {
    if (c > 0) REQUIRE(publish_tensors(*store, key, tensors, small_chunks()).result == PublishResult::published);
    std::uint64_t offset = std::min(size - 1, c * 65536 + (c * 977) % 65536);
    flip_byte(data, offset);
    auto loaded = load_tensors(*store, key);
    INFO("chunk " << c << " offset " << offset << ": " << loaded.lookup.reason);
    CHECK(loaded.lookup.result == LookupResult::damaged);
    CHECK(loaded.lookup.reason.find("chunk " + std::to_string(c)) != std::string::npos);
    CHECK(loaded.tensors.empty());
    CHECK_FALSE(test::path_exists(store->entry_path(key_id(key))));
  }
}

TEST_CASE("damage names the tensor that holds the byte", "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  NamedTensors tensors = test::model_tensors(12, 1);
  Key key = test::test_key(12);
  PublishOptions page_chunks;
  page_chunks.chunk_size = 4096;  // one chunk per page: storages are page-aligned, so exact naming
  REQUIRE(publish_tensors(*store, key, tensors, page_chunks).result == PublishResult::published);
  auto snap = store->lookup(key).snapshot;
  REQUIRE(snap);
  const auto& m = snap->manifest();
  // The storage of "norm.weight".
  std::uint64_t offset = 0;
  for (const auto& t : m.tensors)
    if (t.name == "norm.weight") offset = m.storages[t.storage].offset + 10;
  snap.reset();
  flip_byte(store->entry_path(key_id(key)) + "/data-0000.bin", offset);
  auto report = store->verify(key_id(key));
  CHECK(report.status.code() == StatusCode::damaged);
  REQUIRE(report.damaged_chunks.size() == 1);
  CHECK(report.damaged_chunks[0].tensors == std::vector<std::string>{"norm.weight"});
  CHECK(report.status.message().find("norm.weight") != std::string::npos);
}

TEST_CASE("every byte of the manifest is covered by a check", "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  NamedTensors tensors = {{"w", at::ones({8}, at::kFloat)}};
  Key key = test::test_key(13);
  const std::string manifest = store->entry_path(key_id(key)) + "/manifest.snap";
  REQUIRE(publish_tensors(*store, key, tensors).result == PublishResult::published);
  const std::uint64_t size = test::file_size(manifest);
  for (std::uint64_t i = 0; i < size; ++i) {
    if (i > 0) REQUIRE(publish_tensors(*store, key, tensors).result == PublishResult::published);
    flip_byte(manifest, i);
    auto loaded = load_tensors(*store, key);
    INFO("manifest byte " << i << ": " << loaded.lookup.reason);
    REQUIRE(loaded.lookup.result == LookupResult::damaged);
  }
}

TEST_CASE("a truncated or missing data file and manifest or lease is damage and not a crash", "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  NamedTensors tensors = test::model_tensors(14);
  Key key = test::test_key(14);
  const std::string entry = store->entry_path(key_id(key));
  for (const char* what : {"truncate-data", "remove-data", "remove-manifest", "truncate-manifest", "remove-lease"}) {
    REQUIRE(publish_tensors(*store, key, tensors).result == PublishResult::published);
    std::string w = what;
    if (w == "truncate-data") test::resize_file(entry + "/data-0000.bin", 4096);
    if (w == "remove-data") test::remove_path(entry + "/data-0000.bin");
    if (w == "remove-manifest") test::remove_path(entry + "/manifest.snap");
    if (w == "truncate-manifest") test::resize_file(entry + "/manifest.snap", 40);
    if (w == "remove-lease") test::remove_path(entry + "/lease");
    auto loaded = load_tensors(*store, key);
    INFO(what << ": " << loaded.lookup.reason);
    CHECK(loaded.lookup.result == LookupResult::damaged);
    CHECK_FALSE(test::path_exists(entry));
  }
}

TEST_CASE("unchanged data files are trusted without reading and changed identity triggers a rehash", "[store][integrity]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  NamedTensors tensors = test::model_tensors(15, 4);
  Key key = test::test_key(15);
  REQUIRE(publish_tensors(*store, key, tensors).result == PublishResult::published);
  const std::string data = store->entry_path(key_id(key)) + "/data-0000.bin";
  const std::uint64_t size = test::file_size(data);

  fs->reset_counters();
  auto first = load_tensors(*store, key);
  REQUIRE(first.lookup.result == LookupResult::hit);
  CHECK_FALSE(first.lookup.rehashed);
  CHECK(fs->bytes_read() < 64 * 1024);  // the manifest, not the data
  CHECK(test::same_tensors(first.tensors, tensors));

  // Same bytes, new identity (as after a copy or restore): rehash, then trust again.
  test::bump_mtime(data, 5);
  fs->reset_counters();
  auto second = load_tensors(*store, key);
  REQUIRE(second.lookup.result == LookupResult::hit);
  CHECK(second.lookup.rehashed);
  CHECK(fs->bytes_read() >= size);
  CHECK(second.lookup.bytes_hashed == size);

  fs->reset_counters();
  auto third = load_tensors(*store, key);
  REQUIRE(third.lookup.result == LookupResult::hit);
  CHECK_FALSE(third.lookup.rehashed);
  CHECK(fs->bytes_read() < 64 * 1024);

  fs->reset_counters();
  auto forced = load_tensors(*store, key, nullptr, VerifyPolicy::always_rehash);
  REQUIRE(forced.lookup.result == LookupResult::hit);
  CHECK(fs->bytes_read() >= size);
}

TEST_CASE("unfinished publications are never used and are collected once their writer is gone", "[store][integrity]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  Key key = test::test_key(16);
  const std::string id = key_id(key);
  // What a writer killed before its commit leaves: a complete-looking entry in tmp/.
  REQUIRE(publish_tensors(*store, key, test::model_tensors(16)).result == PublishResult::published);
  const std::string tmp = dir.path() + "/tmp/" + id + ".12345-0-deadbeef";
  test::rename_path(store->entry_path(id), tmp);
  auto loaded = load_tensors(*store, key);
  CHECK(loaded.lookup.result == LookupResult::miss);
  auto listed = store->list_entries();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].state == EntryState::unfinished);
  auto removed = store->collect_garbage(DryRun::yes);
  CHECK(removed.size() == 1);
  CHECK(test::path_exists(tmp));
  removed = store->collect_garbage();
  CHECK(removed.size() == 1);
  CHECK_FALSE(test::path_exists(tmp));
}
