// The secondary store: a read-only cache searched after a local miss, its entry copied into the
// local cache with every chunk proven, then served locally. Damage, absence and an unreachable
// directory are answered with reasons; the secondary directory is never changed.
#include <sys/stat.h>

#include <string>

#include "support/catch.h"
#include "support/child_process.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

#include "snapcache/maintenance.h"

using namespace snapcache;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every path below `dir` with its size and mtime.
std::string tree_state(const std::string& dir) {
  std::string out;
  for (const auto& name : test::list_names(dir)) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    out += path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec) + " " + std::to_string(st.st_mode) + "\n";
    if (S_ISDIR(st.st_mode)) out += tree_state(path);
  }
  return out;
}

void chmod_tree(const std::string& dir, mode_t dirs, mode_t files) {
  for (const auto& name : test::list_names(dir)) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) chmod_tree(path, dirs, files);
    ::chmod(path.c_str(), S_ISDIR(st.st_mode) ? dirs : files);
  }
  ::chmod(dir.c_str(), dirs);
}

Config with_secondary(const std::string& local, const std::string& secondary) {
  Config c = test::test_config(local);
  c.secondary_directory = secondary;
  return c;
}

}  // namespace

TEST_CASE("a local miss is served from the secondary store in a new process, then locally", "[secondary][process]") {
  test::TempDir shared, local;
  REQUIRE(test::run_helper(test::kStoreHelper, {"publish", shared.path(), "71", "4"}) == 0);
  chmod_tree(shared.path(), 0555, 0444);  // as a read-only mount shows it
  const std::string before = tree_state(shared.path());
  {
    test::ChildProcess loader(test::kStoreHelper, {"load-secondary", local.path(), "71", shared.path()});
    REQUIRE(loader.wait_for_line("reason"));
    INFO(loader.last_line());
    CHECK(has(loader.last_line(), "copied from the secondary store " + shared.path()));
    REQUIRE(loader.wait_for_line("result"));
    CHECK(loader.last_line() == "result hit");
    CHECK(loader.wait() == 0);
  }
  CHECK(tree_state(shared.path()) == before);  // nothing written, touched or locked-and-marked there
  chmod_tree(shared.path(), 0755, 0644);
  // The copy is an ordinary local entry now: the next load hits it without the secondary store.
  auto store = *Store::open(test::test_config(local.path()));
  auto hit = store->lookup(test::store_key(71), VerifyPolicy::trust_identity);
  REQUIRE(hit.result == LookupResult::hit);
  CHECK_FALSE(hit.rehashed);
  CHECK_FALSE(has(hit.reason, "secondary"));
  CHECK(test::same_data(*hit.snapshot, test::raw_model(71, 4)));
  CHECK(verify_entry(*store, key_id(test::store_key(71))).status.is_ok());
}

TEST_CASE("a damaged entry in the secondary store is a fallback and stays where it is", "[secondary]") {
  test::TempDir shared, local;
  auto source = *Store::open(test::test_config(shared.path()));
  REQUIRE(test::publish_raw(*source, test::store_key(72), test::raw_model(72, 2)).result == PublishResult::published);
  const std::string data = source->entry_path(key_id(test::store_key(72))) + "/data-0000.bin";
  ::chmod(data.c_str(), 0644);
  test::flip_byte(data, 5000);
  const std::string before = tree_state(shared.path());
  auto store = *Store::open(with_secondary(local.path(), shared.path()));
  auto out = store->lookup(test::store_key(72));
  INFO(out.reason);
  CHECK(out.result == LookupResult::fallback);
  CHECK(has(out.reason, "the secondary store " + shared.path()));
  CHECK(has(out.reason, "is damaged"));
  CHECK(has(out.reason, "chunk 0"));
  CHECK(tree_state(shared.path()) == before);  // not quarantined, not repaired
  CHECK(test::count_entries(local.path() + "/entries") == 0);
  CHECK(test::count_entries(local.path() + "/tmp") == 0);
}

TEST_CASE("a secondary store that does not exist or has no entry answers with a reason", "[secondary]") {
  test::TempDir shared, local;
  auto gone = *Store::open(with_secondary(local.path(), shared.path() + "/not-there"));
  auto fallback = gone->lookup(test::store_key(73));
  INFO(fallback.reason);
  CHECK(fallback.result == LookupResult::fallback);
  CHECK(has(fallback.reason, "cannot be read"));
  CHECK(has(fallback.reason, shared.path() + "/not-there"));

  // A file where the directory should be.
  test::write_bytes(shared / "file", "x");
  auto file = *Store::open(with_secondary(local.path(), shared / "file"));
  CHECK(file->lookup(test::store_key(73)).result == LookupResult::fallback);

  auto source = *Store::open(test::test_config(shared / "cache"));
  REQUIRE(test::publish_raw(*source, test::store_key(74), test::raw_model(74)).result == PublishResult::published);
  auto store = *Store::open(with_secondary(local.path(), shared / "cache"));
  auto miss = store->lookup(test::store_key(73));
  INFO(miss.reason);
  CHECK(miss.result == LookupResult::miss);
  CHECK(has(miss.reason, "has no entry for it either"));
  // The entry there is found and copied.
  auto hit = store->lookup(test::store_key(74));
  INFO(hit.reason);
  CHECK(hit.result == LookupResult::hit);
  CHECK(has(hit.reason, "copied from the secondary store"));
}

TEST_CASE("a secondary store's symlinked entry is not followed", "[secondary][hostile]") {
  test::TempDir shared, elsewhere, local;
  auto source = *Store::open(test::test_config(elsewhere.path()));
  REQUIRE(test::publish_raw(*source, test::store_key(75), test::raw_model(75)).result == PublishResult::published);
  const std::string id = key_id(test::store_key(75));
  ::mkdir((shared / "entries").c_str(), 0755);
  REQUIRE(::symlink(source->entry_path(id).c_str(), (shared.path() + "/entries/" + id).c_str()) == 0);
  auto store = *Store::open(with_secondary(local.path(), shared.path()));
  auto out = store->lookup(test::store_key(75));
  INFO(out.reason);
  CHECK(out.result == LookupResult::fallback);
  CHECK(has(out.reason, "symbolic link"));
  CHECK(test::count_entries(local.path() + "/entries") == 0);
}
