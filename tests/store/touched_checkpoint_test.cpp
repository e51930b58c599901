// A checkpoint whose files change identity but not bytes (touch, a copy over itself) is served by
// the entry made from it: the changed files are hashed once and compared with the digests recorded
// at publication. Other bytes miss, and the entry is then stale.
#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

using namespace snapcache;

namespace {

void write_bytes(const std::string& path, char fill, std::size_t n) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << std::string(n, fill);
}

// `touch -d`: new times, the same bytes (and a new ctime, as any touch gives).
void touch(const std::string& path, std::int64_t seconds_later) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  const timespec times[2] = {{st.st_atim.tv_sec + seconds_later, 0}, {st.st_mtim.tv_sec + seconds_later, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

Key key_of(const std::string& checkpoint) {
  Key key = test::store_key(1);
  key.checkpoint = describe_checkpoint(*posix_file_system(), {checkpoint}).value();
  return key;
}

}  // namespace

TEST_CASE("a touched checkpoint is served by its entry after one hash, and other bytes miss", "[store][key]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir / "cache"));
  const std::string checkpoint = dir / "model.safetensors";
  const std::size_t size = 3u << 20;
  write_bytes(checkpoint, 'a', size);
  const test::RawModel model = test::raw_model(1);
  const Key made_from = key_of(checkpoint);
  REQUIRE(test::publish_raw(*store, made_from, model).result == PublishResult::published);

  touch(checkpoint, 60);
  const Key touched = key_of(checkpoint);
  REQUIRE(key_id(touched) != key_id(made_from));
  auto first = store->lookup(touched);
  REQUIRE(first.result == LookupResult::hit);
  CHECK(first.entry_id == key_id(made_from));
  CHECK(test::same_data(*first.snapshot, model));
  CHECK(first.reason.find("1 checkpoint file changed identity since entry " + key_id(made_from).substr(0, 12) +
                          " was made, not bytes (3.0 MiB hashed") != std::string::npos);
  first = {};
  // The new identity is remembered: the next load reads nothing of the checkpoint.
  auto second = store->lookup(touched);
  REQUIRE(second.result == LookupResult::hit);
  CHECK(second.reason.find("(0 B hashed") != std::string::npos);
  second = {};
  auto entries = list_entries(*store).value();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].stale.empty());  // gc and `evict --stale` keep it

  // The same size, other bytes: a miss, and the entry is stale from then on.
  write_bytes(checkpoint, 'b', size);
  const Key rewritten = key_of(checkpoint);
  auto miss = store->lookup(rewritten);
  CHECK(miss.result == LookupResult::miss);
  CHECK(miss.reason.find("nearest entry " + key_id(made_from).substr(0, 12)) != std::string::npos);
  entries = list_entries(*store).value();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].stale.find("its bytes differ") != std::string::npos);
}

TEST_CASE("a touched checkpoint of another size, or one whose digest was never recorded, misses", "[store][key]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir / "cache"));
  const std::string checkpoint = dir / "model.safetensors";
  write_bytes(checkpoint, 'a', 1u << 20);
  const Key made_from = key_of(checkpoint);
  REQUIRE(test::publish_raw(*store, made_from, test::raw_model(1)).result == PublishResult::published);
  // No digest recorded (a cache from before digests were recorded at publication): the miss stands.
  REQUIRE(::unlink((dir / "cache/digests.json").c_str()) == 0);
  touch(checkpoint, 60);
  CHECK(store->lookup(key_of(checkpoint)).result == LookupResult::miss);
  CHECK(list_entries(*store).value().at(0).stale.find("its modification time differs") != std::string::npos);
  // Another size is other bytes, whatever the memo says.
  write_bytes(checkpoint, 'a', 2u << 20);
  CHECK(store->lookup(key_of(checkpoint)).result == LookupResult::miss);
}
