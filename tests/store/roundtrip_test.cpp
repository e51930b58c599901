// Publish raw storages, look them up in the same process, and compare byte for byte: every
// layout the manifest can describe, aliases, zero-size storages, private mappings, lifetimes.
#include <algorithm>
#include <cstring>

#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

using namespace snapcache;

namespace {

std::shared_ptr<Snapshot> round_trip(Store& store, const test::RawModel& model, int seed = 1) {
  auto pub = test::publish_raw(store, test::store_key(seed), model);
  INFO(pub.status.to_string());
  REQUIRE(pub.result == PublishResult::published);
  auto found = store.lookup(test::store_key(seed));
  INFO(found.reason);
  REQUIRE(found.result == LookupResult::hit);
  REQUIRE(found.snapshot);
  return found.snapshot;
}

}  // namespace

TEST_CASE("storages and their tensor records round-trip byte for byte", "[store][roundtrip]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel model = test::raw_model(1, 1);
  auto snap = round_trip(*store, model);
  CHECK(test::same_data(*snap, model));
  CHECK(snap->id() == key_id(test::store_key(1)));
  CHECK(snap->path() == store->entry_path(snap->id()));
  CHECK(snap->manifest().key == test::store_key(1));
  CHECK(snap->data_file_path(0) == snap->path() + "/data-0000.bin");
  CHECK(test::file_size(snap->data_file_path(0)) == snap->manifest().files[0].size);
}

TEST_CASE("aliases share one storage again and a zero-size storage stays empty", "[store][layout]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel model = test::raw_model(2, 1);
  auto snap = round_trip(*store, model, 2);
  const Manifest& m = snap->manifest();
  auto record = [&](const std::string& name) -> const TensorRecord& {
    for (const auto& t : m.tensors)
      if (t.name == name) return t;
    FAIL("no tensor " << name);
    return m.tensors.front();
  };
  CHECK(record("embed.weight").storage == record("lm_head.weight").storage);
  CHECK(record("attn.qkv.weight").storage == record("attn.k_view").storage);
  CHECK(record("attn.k_view").storage_offset == 256 * 256);
  CHECK(record("attn.proj.weight_t").strides == std::vector<std::int64_t>{1, 512});
  CHECK(record("embed.weight").storage != record("attn.qkv.weight").storage);
  CHECK(m.storages[record("empty.bias").storage].nbytes == 0);
}

TEST_CASE("storages are aligned to 4 KiB in the mapping", "[store][layout]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel model;
  model.storages = {std::vector<std::byte>(3, std::byte{1}), std::vector<std::byte>(5, std::byte{2})};
  model.tensors = {{"a", DType::uint8, {3}, {1}, 0, 0}, {"b", DType::uint8, {5}, {1}, 1, 0}};
  auto snap = round_trip(*store, model);
  for (std::uint32_t s = 0; s < 2; ++s) CHECK(reinterpret_cast<std::uintptr_t>(snap->storage_data(s)) % 4096 == 0);
  CHECK(test::same_data(*snap, model));
}

TEST_CASE("writes to a snapshot's storages stay private - the entry on disk is unchanged", "[store][mmap]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel model = test::raw_model(5);
  auto snap = round_trip(*store, model, 5);
  const std::string data_path = snap->data_file_path(0);
  const std::string before = test::read_bytes(data_path);
  for (std::uint32_t s = 0; s < model.storages.size(); ++s)  // what a post-load method might do
    std::memset(snap->storage_data(s), 0, model.storages[s].size());
  CHECK(test::read_bytes(data_path) == before);
  auto again = store->lookup(test::store_key(5));
  REQUIRE(again.result == LookupResult::hit);
  CHECK(test::same_data(*again.snapshot, model));
}

TEST_CASE("a snapshot keeps its mapping and the lease alive after the store is gone", "[store][lifetime]") {
  test::TempDir dir;
  test::RawModel model = test::raw_model(6);
  std::shared_ptr<Snapshot> survivor;
  const std::string id = key_id(test::store_key(6));
  {
    auto store = *Store::open(test::test_config(dir.path()));
    survivor = round_trip(*store, model, 6);
  }
  // The store and the outcome are gone; the snapshot still reads its bytes...
  CHECK(test::same_data(*survivor, model));
  // ...and still holds the lease: the entry cannot be evicted.
  auto store = *Store::open(test::test_config(dir.path()));
  CHECK(remove_entry(*store, id).status().code() == StatusCode::busy);
  survivor.reset();
  CHECK(remove_entry(*store, id).is_ok());
}

TEST_CASE("a warm load is checked against the expected layout", "[store][layout]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel model = test::raw_model(9);
  REQUIRE(test::publish_raw(*store, test::store_key(9), model).result == PublishResult::published);
  ExpectedLayout good = test::expected_layout(model);
  CHECK(store->lookup(test::store_key(9), VerifyPolicy::trust_identity, &good).result == LookupResult::hit);

  auto expect_miss = [&](ExpectedLayout layout, const std::string& words) {
    auto found = store->lookup(test::store_key(9), VerifyPolicy::trust_identity, &layout);
    CHECK(found.result == LookupResult::miss);
    CHECK_FALSE(found.snapshot);
    INFO(found.reason);
    CHECK(found.reason.find(words) != std::string::npos);
  };
  ExpectedLayout l = good;
  l.pop_back();
  expect_miss(l, "not expected");
  l = good;
  l.push_back({"extra.weight", DType::float32, {1}, std::nullopt, ""});
  expect_miss(l, "missing");
  l = good;
  l[0].dtype = DType::float16;
  expect_miss(l, "dtype");
  l = good;
  l[0].sizes[0] += 1;
  expect_miss(l, "shape");
  l = good;
  l[4].strides = std::vector<std::int64_t>{512, 1};
  expect_miss(l, "strides");
  l = good;
  l[1].alias_group = "elsewhere";  // lm_head is tied to embed in the entry
  expect_miss(l, "share");
}

TEST_CASE("a storage without data or a layout the manifest cannot hold is refused and nothing is written",
          "[store][layout]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  std::vector<StorageSource> no_data = {{nullptr, 16}};
  auto out = store->publish(test::store_key(10), no_data, {{"a", DType::uint8, {16}, {1}, 0, 0}});
  CHECK(out.result == PublishResult::failed);
  CHECK(out.status.code() == StatusCode::invalid_argument);
  test::RawModel model = test::raw_model(10);
  model.tensors[0].sizes[0] *= 2;  // reaches past its storage
  out = test::publish_raw(*store, test::store_key(10), model);
  CHECK(out.result == PublishResult::failed);
  CHECK(out.status.message().find("invalid tensor layout") != std::string::npos);
  CHECK(list_entries(*store).value().empty());
}

TEST_CASE("a fingerprinted publication keeps the fingerprinted bytes, or nothing when they changed",
          "[store][roundtrip]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  test::RawModel model = test::raw_model(3, 3);
  PublishOptions options{.chunk_size = 1 << 18, .threads = 2};
  auto fingerprint = fingerprint_sources(model.sources(), options);
  REQUIRE(fingerprint.is_ok());
  REQUIRE(fingerprint->size() > 2);  // several chunks, so the change below is in one of many

  SECTION("unchanged: published, with the fingerprint as its chunk checksums") {
    options.expected_chunk_hashes = *fingerprint;
    auto pub = test::publish_raw(*store, test::store_key(3), model, options);
    INFO(pub.status.to_string());
    REQUIRE(pub.result == PublishResult::published);
    auto found = store->lookup(test::store_key(3));
    REQUIRE(found.result == LookupResult::hit);
    CHECK(found.snapshot->manifest().files[0].chunk_hashes == *fingerprint);
    CHECK(test::same_data(*found.snapshot, model));
    CHECK_FALSE(sources_changed_while_published(*store, test::store_key(3)));
  }
  SECTION("one byte changed after the fingerprint: failed, nothing kept, and the store remembers") {
    options.expected_chunk_hashes = *fingerprint;
    auto& largest = *std::max_element(model.storages.begin(), model.storages.end(),
                                      [](const auto& a, const auto& b) { return a.size() < b.size(); });
    largest[largest.size() / 2] ^= std::byte{1};
    auto pub = test::publish_raw(*store, test::store_key(3), model, options);
    CHECK(pub.result == PublishResult::failed);
    CHECK(pub.status.code() == StatusCode::mismatch);
    CHECK(pub.status.message().find("changed after it was fingerprinted") != std::string::npos);
    CHECK(store->lookup(test::store_key(3)).result == LookupResult::miss);
    CHECK(sources_changed_while_published(*store, test::store_key(3)));
    auto listed = list_entries(*store);
    REQUIRE(listed.is_ok());
    CHECK(listed->empty());  // no entry, and no unfinished one left in tmp/
  }
  SECTION("a fingerprint of another layout is refused before anything is written") {
    options.expected_chunk_hashes = {1, 2};
    auto pub = test::publish_raw(*store, test::store_key(3), model, options);
    CHECK(pub.result == PublishResult::failed);
    CHECK(pub.status.code() == StatusCode::invalid_argument);
    CHECK_FALSE(sources_changed_while_published(*store, test::store_key(3)));
  }
}
