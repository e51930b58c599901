// The secondary store: a read-only cache searched after a local miss, its entry copied into the
// local cache with every chunk proven, then served locally. Damage, absence and an unreachable
// directory are answered with reasons; the secondary directory is never changed.
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "support/catch.h"
#include "support/child_process.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

#include "snapcache/key.h"
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
  // The copy is an ordinary local entry now: the next load hits it without the secondary store,
  // and names where it came from, as the copy recorded it (not the secondary store's own record).
  auto store = *Store::open(test::test_config(local.path()));
  auto hit = store->lookup(test::store_key(71), VerifyPolicy::trust_identity);
  REQUIRE(hit.result == LookupResult::hit);
  CHECK_FALSE(hit.rehashed);
  CHECK_FALSE(has(hit.reason, "every chunk proven"));
  CHECK(has(hit.reason, "entry copied from the secondary store " + shared.path() + "; "));
  auto info = entry_info(*store, key_id(test::store_key(71)));
  REQUIRE(info.is_ok());
  CHECK(info->origin.kind == EntryOriginKind::secondary);
  CHECK(info->origin.source == shared.path());
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

// --- the trust rule: who may write the way to an entry (docs/scale-out.md) ----------------------

namespace {

constexpr uid_t kNobody = 65534;

// `program args` run as uid `uid` (group the same number, no supplementary groups), through
// setpriv: a real process of another user.
int run_as(uid_t uid, const std::string& program, const std::vector<std::string>& args) {
  std::vector<std::string> all{"--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid), "--clear-groups",
                               program};
  all.insert(all.end(), args.begin(), args.end());
  return test::run_helper("/usr/bin/setpriv", all);
}

uid_t owner_of(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

}  // namespace

TEST_CASE("a forged entry planted by another user in a world-writable secondary store is refused, and the load "
          "takes the ordinary path",
          "[secondary][hostile][trust][root]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: planting as another user needs root to switch users");
    return;
  }
  test::TempDir base, local;
  REQUIRE(::chmod(base.path().c_str(), 0755) == 0);  // uid 65534 may pass through to the shared directory
  const std::string shared = base / "shared";
  REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(shared.c_str(), 0777) == 0);  // what `mkdir -m 777` or a careless share gives
  // uid 65534 publishes, in a cache of its own, an entry for key 76 whose weights are seed 77's:
  // self-consistent, every checksum right, and not the key's weights. Then it moves the entries
  // into the shared directory, where root's loads look.
  REQUIRE(run_as(kNobody, test::kStoreHelper, {"publish", shared + "/mine", "76", "1", "77"}) == 0);
  REQUIRE(run_as(kNobody, "/bin/mv", {shared + "/mine/entries", shared + "/entries"}) == 0);
  REQUIRE(owner_of(shared + "/entries") == kNobody);

  {
    test::ChildProcess loader(test::kStoreHelper, {"load-secondary", local.path(), "76", shared});
    REQUIRE(loader.wait_for_line("reason"));
    const std::string reason = loader.last_line();
    INFO(reason);
    CHECK(has(reason, "the secondary store " + shared + " is writable by group or others (mode 0777)"));
    CHECK(has(reason, "another user could plant an entry there"));
    CHECK(has(reason, "chmod go-w " + shared));
    REQUIRE(loader.wait_for_line("result"));
    INFO(loader.last_line());
    CHECK(loader.last_line().starts_with("result fallback"));  // not "hit", not "wrong-data"; not a miss
    CHECK(loader.wait() == 1);
  }
  CHECK(test::count_entries(local.path() + "/entries") == 0);  // nothing of it was copied
  CHECK(test::count_entries(local.path() + "/tmp") == 0);

  // The directory fixed (0755, root's), entries/ is still the other user's: refused too.
  REQUIRE(::chmod(shared.c_str(), 0755) == 0);
  auto store = *Store::open(with_secondary(local.path(), shared));
  auto out = store->lookup(test::store_key(76));
  INFO(out.reason);
  CHECK(out.result == LookupResult::fallback);
  CHECK(has(out.reason, shared + "/entries is owned by uid 65534, not by this user (uid 0)"));
  CHECK(test::count_entries(local.path() + "/entries") == 0);
}

TEST_CASE("a secondary store owned by another user and writable only by it is used", "[secondary][trust][root]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: a store of another user needs root to switch users");
    return;
  }
  test::TempDir base;
  REQUIRE(::chmod(base.path().c_str(), 0755) == 0);
  // A team's share: uid 65534's own cache, directories 0755, entry files 0444, as publication leaves them.
  const std::string theirs = base / "theirs";
  REQUIRE(::mkdir(theirs.c_str(), 0755) == 0);
  REQUIRE(::chown(theirs.c_str(), kNobody, kNobody) == 0);
  REQUIRE(run_as(kNobody, test::kStoreHelper, {"publish", theirs, "78", "1"}) == 0);
  REQUIRE(owner_of(theirs) == kNobody);
  const std::string id = key_id(test::store_key(78));
  REQUIRE(owner_of(theirs + "/entries/" + id + "/data-0000.bin") == kNobody);

  // Loaded by root, in this process.
  test::TempDir local;
  auto store = *Store::open(with_secondary(local.path(), theirs));
  auto hit = store->lookup(test::store_key(78));
  INFO(hit.reason);
  REQUIRE(hit.result == LookupResult::hit);
  CHECK(has(hit.reason, "copied from the secondary store " + theirs));
  CHECK(test::same_data(*hit.snapshot, test::raw_model(78)));

  // Loaded by a third user (uid 1000, a process of its own, with a cache of its own).
  const std::string cache_1000 = base / "cache-1000";
  REQUIRE(::mkdir(cache_1000.c_str(), 0755) == 0);
  REQUIRE(::chown(cache_1000.c_str(), 1000, 1000) == 0);
  CHECK(run_as(1000, test::kStoreHelper, {"load-secondary", cache_1000, "78", theirs}) == 0);
  CHECK(test::count_entries(cache_1000 + "/entries") == 1);
}

TEST_CASE("every directory and file on the way to a secondary entry's bytes is checked", "[secondary][trust]") {
  test::TempDir shared, local;
  auto source = *Store::open(test::test_config(shared.path()));
  REQUIRE(test::publish_raw(*source, test::store_key(79), test::raw_model(79)).result == PublishResult::published);
  const std::string entry = source->entry_path(key_id(test::store_key(79)));
  auto store = *Store::open(with_secondary(local.path(), shared.path()));
  // Each case is made, refused with the rule and the fix, then undone.
  struct Case {
    std::string path;
    mode_t mode;
    uid_t owner;
    std::string said;
  };
  std::vector<Case> cases = {
      {shared / "entries", 0775, 0, shared / "entries is writable by group or others (mode 0775)"},
      {entry, 0757, 0, entry + " is writable by group or others (mode 0757)"},
      {entry + "/data-0000.bin", 0664, 0, "data-0000.bin is writable by group or others (mode 0664)"},
      {entry + "/manifest.snap", 0444, 4321, "manifest.snap is owned by uid 4321, not by this user"},
      {entry, 0755, 4321, entry + " is owned by uid 4321"},
  };
  for (const Case& c : cases) {
    struct stat before {};
    REQUIRE(::lstat(c.path.c_str(), &before) == 0);
    if (::geteuid() != 0 && c.owner != 0) continue;  // chown needs root
    REQUIRE(::chmod(c.path.c_str(), c.mode) == 0);
    if (c.owner != 0) REQUIRE(::chown(c.path.c_str(), c.owner, c.owner) == 0);
    auto out = store->lookup(test::store_key(79));
    INFO(c.path << ": " << out.reason);
    CHECK(out.result == LookupResult::fallback);
    CHECK(has(out.reason, "the secondary store " + shared.path() + ": "));
    CHECK(has(out.reason, c.said));
    CHECK(test::count_entries(local.path() + "/entries") == 0);
    REQUIRE(::chmod(c.path.c_str(), before.st_mode & 07777) == 0);
    REQUIRE(::chown(c.path.c_str(), before.st_uid, before.st_gid) == 0);
  }
  // Undone, the same store is used.
  auto hit = store->lookup(test::store_key(79));
  INFO(hit.reason);
  CHECK(hit.result == LookupResult::hit);
}

TEST_CASE("a secondary store's symlinked entries/ is not followed", "[secondary][hostile]") {
  test::TempDir shared, elsewhere, local;
  auto source = *Store::open(test::test_config(elsewhere.path()));
  REQUIRE(test::publish_raw(*source, test::store_key(80), test::raw_model(80)).result == PublishResult::published);
  REQUIRE(::symlink((elsewhere / "entries").c_str(), (shared / "entries").c_str()) == 0);
  auto store = *Store::open(with_secondary(local.path(), shared.path()));
  auto out = store->lookup(test::store_key(80));
  INFO(out.reason);
  CHECK(out.result == LookupResult::fallback);
  CHECK(has(out.reason, shared / "entries is a symbolic link"));
  CHECK(test::count_entries(local.path() + "/entries") == 0);
}
