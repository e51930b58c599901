// Entries whose data are the same bytes share one file (src/store/shared_data.h): on a real file
// system, with the cache measured, every entry still trusted without a rehash, and removal of one
// sharer leaving the other whole.
#include <sys/stat.h>
#include <sys/time.h>

#include <filesystem>
#include <memory>
#include <string>

#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "store/size_ledger.h"
#include "support/catch.h"
#include "support/fault_injection.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

using namespace snapcache;

namespace {

// The same checkpoint and component as `key`, under another Torch: a key that changes nothing in
// the tensors the loader builds.
Key after_torch_upgrade(Key key) {
  key.torch.version += ".post1";
  return key;
}

struct stat data_file(const std::string& cache, const Key& key) {
  struct stat st {};
  REQUIRE(::stat((cache + "/entries/" + key_id(key) + "/data-0000.bin").c_str(), &st) == 0);
  return st;
}

// The counted size (store/size_ledger.h) is the measured one, less the verified stamps written
// since publication, which the ledger leaves to gc's measure.
void counted_as_measured(Store& store) {
  const std::uint64_t counted = store::size_now(store).value(), measured = total_bytes(store).value();
  CHECK(counted <= measured);
  CHECK(measured - counted < 1024);
}

// A hit that trusted the entry's files as they are, byte for byte the model.
void served_without_rehash(Store& store, const Key& key, const test::RawModel& model) {
  LookupOutcome hit = store.lookup(key);
  REQUIRE(hit.result == LookupResult::hit);
  CHECK_FALSE(hit.rehashed);
  CHECK(test::same_data(*hit.snapshot, model));
}

}  // namespace

TEST_CASE("entries whose data are the same bytes share one file, counted once and trusted by both",
          "[store][shared]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  const test::RawModel model = test::raw_model(1, 4);
  const Key first = test::store_key(1);
  const Key second = after_torch_upgrade(first);
  REQUIRE(test::publish_raw(*store, first, model).result == PublishResult::published);
  const std::uint64_t one = total_bytes(*store).value();
  REQUIRE(test::publish_raw(*store, second, model).result == PublishResult::published);

  // One file of two names; the cache grew by the manifest and the small files, not by the data.
  const struct stat a = data_file(dir.path(), first), b = data_file(dir.path(), second);
  CHECK(a.st_ino == b.st_ino);
  CHECK(a.st_nlink == 2);
  CHECK(total_bytes(*store).value() - one < model.bytes() / 2);
  counted_as_measured(*store);
  // The second name moved the file's ctime: the first entry re-recorded its identity, so neither
  // load reads the data to trust it.
  served_without_rehash(*store, first, model);
  served_without_rehash(*store, second, model);

  // Listed with the shared bytes named, and verified with the shared file hashed once.
  CHECK(entry_info(*store, key_id(second)).value().shared_bytes >= model.bytes());
  VerifiedFiles verified;
  const VerifyReport by_first = verify_entry(*store, key_id(first), {}, verified);
  const VerifyReport by_second = verify_entry(*store, key_id(second), {}, verified);
  CHECK(by_first.status.is_ok());
  CHECK(by_second.status.is_ok());
  CHECK(by_first.bytes_hashed >= model.bytes());
  CHECK(by_second.bytes_hashed == 0);
  CHECK(by_second.bytes_proven_before == by_first.bytes_hashed);

  // Another model of the same checkpoint shares nothing: equal bytes only.
  const Key other = [&] {
    Key k = first;
    k.dtype = "float16";
    return k;
  }();
  REQUIRE(test::publish_raw(*store, other, test::raw_model(2, 4)).result == PublishResult::published);
  CHECK(data_file(dir.path(), other).st_nlink == 1);

  // Removing one sharer frees nothing of the data, and leaves the other whole and trusted.
  const std::uint64_t before = total_bytes(*store).value();
  auto freed = remove_entry(*store, key_id(first));
  REQUIRE(freed);
  CHECK(*freed < model.bytes() / 2);
  CHECK(before - total_bytes(*store).value() < model.bytes() / 2);
  CHECK(data_file(dir.path(), second).st_nlink == 1);
  served_without_rehash(*store, second, model);
  CHECK(verify_entry(*store, key_id(second)).status.is_ok());
  counted_as_measured(*store);

  // The last name frees the bytes.
  const std::uint64_t last = total_bytes(*store).value();
  freed = remove_entry(*store, key_id(second));
  REQUIRE(freed);
  CHECK(*freed >= model.bytes());
  CHECK(last - total_bytes(*store).value() >= model.bytes());
}

TEST_CASE("a twin whose file changed since it was proven is not shared, nor is one a link cannot reach",
          "[store][shared]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  const test::RawModel model = test::raw_model(3, 2);
  const Key first = test::store_key(3);
  REQUIRE(test::publish_raw(*store, first, model).result == PublishResult::published);

  SECTION("touched: its checksums are not trusted until a load rehashes it, so it nominates nothing") {
    const std::string path = dir.path() + "/entries/" + key_id(first) + "/data-0000.bin";
    REQUIRE(::utimes(path.c_str(), nullptr) == 0);
    const Key second = after_torch_upgrade(first);
    REQUIRE(test::publish_raw(*store, second, model).result == PublishResult::published);
    CHECK(data_file(dir.path(), second).st_nlink == 1);
    CHECK(data_file(dir.path(), first).st_nlink == 1);
  }
  SECTION("the link fails: the entry keeps its own copy, published all the same") {
    fs->inject({.op = FsOp::link, .sys_errno = EXDEV, .skip = 0, .times = 1, .short_write = false, .path_contains = {}});
    const Key second = after_torch_upgrade(first);
    REQUIRE(test::publish_raw(*store, second, model).result == PublishResult::published);
    CHECK(fs->faults_fired() == 1);
    CHECK(data_file(dir.path(), second).st_nlink == 1);
    served_without_rehash(*store, second, model);
    served_without_rehash(*store, first, model);
    counted_as_measured(*store);
  }
}
