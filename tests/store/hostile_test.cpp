// A hostile cache directory: symlinks, FIFOs, huge sparse files and foreign directories planted
// where the store keeps its files. Nothing outside the cache is deleted, counted or written, no
// operation hangs or crashes, and each refusal says why (docs/reliability.md).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <stdexcept>

#include "snapcache/config.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "support/catch.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"
#include "support/fault_injection.h"
#include "support/page_cache.h"

using namespace snapcache;

namespace {

void make_symlink(const std::string& target, const std::string& link) {
  if (::symlink(target.c_str(), link.c_str()) != 0) throw std::runtime_error("symlink " + link);
}

void make_fifo(const std::string& path) {
  if (::mkfifo(path.c_str(), 0644) != 0) throw std::runtime_error("mkfifo " + path);
}

// A file of `size` bytes that takes no disk: reading it whole would need `size` bytes of memory.
void make_sparse(const std::string& path, std::uint64_t size) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("open " + path);
  int rc = ::ftruncate(fd, static_cast<off_t>(size));
  ::close(fd);
  if (rc != 0) throw std::runtime_error("ftruncate " + path);
}

std::int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("stat " + path);
  return st.st_mtim.tv_sec * 1'000'000'000ll + st.st_mtim.tv_nsec;
}

unsigned permissions(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) throw std::runtime_error("stat " + path);
  return st.st_mode & 07777;
}

constexpr std::uint64_t kTiB = 1ull << 40;

// Runs `body` in a child process that SIGALRM kills after `seconds`: a regression that blocks
// (a FIFO opened for reading waits for a writer forever) fails the test instead of hanging it.
// Returns the body's exit code, or 128 + the signal that ended it.
int within_seconds(unsigned seconds, const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    ::alarm(seconds);
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    ::_exit(code);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Outside the cache: a directory with a file and a subdirectory that must survive everything.
struct Outside {
  test::TempDir dir;
  Outside() {
    test::write_bytes(dir / "precious", std::string(3u << 20, 'p'));  // 3 MiB: visible if counted
    ::mkdir((dir / "sub").c_str(), 0755);
    test::write_bytes(dir / "sub/file", "keep");
  }
  bool intact() const {
    return test::path_exists(dir / "precious") && test::file_size(dir / "precious") == (3u << 20) &&
           test::read_bytes(dir / "sub/file") == "keep";
  }
};

}  // namespace

TEST_CASE("symlinks in trash/, tmp/, an entry or entries/ never make publication, evict or gc delete or count "
          "their targets",
          "[store][hostile][deletes]") {
  Outside outside;
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  const Key kept = test::store_key(1);
  REQUIRE(test::publish_raw(*store, kept, test::raw_model(1)).result == PublishResult::published);
  const std::string entry = store->entry_path(key_id(kept));

  make_symlink(outside.dir.path(), dir / "trash/0123456789abcdef0123456789abcdef.x");
  make_symlink(outside.dir.path(), dir / "tmp/0123456789abcdef0123456789abcdef.y");
  make_symlink(outside.dir.path(), entry + "/extra");
  make_symlink(outside.dir / "precious", entry + "/extra-file");
  // Two loops: followed, each level would double the paths to walk.
  make_symlink(".", entry + "/loop-a");
  make_symlink("..", entry + "/loop-b");
  // An entry that is itself a link to a directory elsewhere, under the id of a key we look up.
  const Key linked = test::store_key(2);
  make_symlink(outside.dir.path(), store->entry_path(key_id(linked)));

  // Counting: the links count as nothing (the 3 MiB outside is not the cache's) and the loops
  // are not walked, so it finishes.
  CHECK(within_seconds(20, [&] {
          auto total = total_bytes(*store);
          auto listed = list_entries(*store);
          return total && *total < (3u << 20) && listed ? 0 : 1;
        }) == 0);

  // A load of the linked entry refuses it (and moves the link to trash/), publication empties
  // trash/ and tmp/ of dead leftovers, gc takes strays, evict removes entries.
  auto loaded = store->lookup(linked);
  INFO(loaded.reason);
  CHECK(loaded.result != LookupResult::hit);
  CHECK(outside.intact());
  CHECK(test::publish_raw(*store, test::store_key(3), test::raw_model(3)).result == PublishResult::published);
  CHECK(outside.intact());
  auto garbage = collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
  REQUIRE(garbage);
  CHECK(outside.intact());
  EvictRequest all;
  all.all = true;
  auto evicted = evict(*store, all);
  REQUIRE(evicted);
  CHECK(outside.intact());
  auto again = collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = true});
  REQUIRE(again);
  CHECK(outside.intact());
  // The links themselves are gone with what held them.
  CHECK(test::count_entries(dir / "trash") == 0);
  CHECK(test::count_entries(dir / "tmp") == 0);
  CHECK(test::count_entries(dir / "entries") == 0);
}

TEST_CASE("stats.json, a lease and misses/ are never written through a symlink", "[store][hostile][writes]") {
  test::TempDir outside;
  test::write_bytes(outside / "victim", "do not touch");
  ::mkdir((outside / "keys").c_str(), 0755);
  test::set_age(outside / "victim", 3600);
  const std::int64_t victim_mtime = mtime_ns(outside / "victim");

  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  make_symlink(outside / "victim", dir / "stats.json");
  make_symlink(outside / "keys", dir / "misses");

  CHECK(store->lookup(test::store_key(5)).result == LookupResult::miss);  // counts a miss, records it
  CHECK(test::read_bytes(outside / "victim") == "do not touch");
  CHECK(test::count_entries(outside / "keys") == 0);
  CHECK(recorded_misses(*store).empty());

  // A lease replaced by a link: a load never touches (or locks) the target, and the entry is
  // not served.
  const Key key = test::store_key(6);
  REQUIRE(test::publish_raw(*store, key, test::raw_model(6)).result == PublishResult::published);
  const std::string lease = store->entry_path(key_id(key)) + "/lease";
  test::remove_path(lease);
  make_symlink(outside / "victim", lease);
  auto loaded = store->lookup(key);
  INFO(loaded.reason);
  CHECK(loaded.result != LookupResult::hit);
  CHECK(mtime_ns(outside / "victim") == victim_mtime);
  CHECK(test::read_bytes(outside / "victim") == "do not touch");
  CHECK(test::path_exists(outside / "victim"));
}

namespace {

std::uint64_t link_count(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) throw std::runtime_error("stat " + path);
  return st.st_nlink;
}

void make_hard_link(const std::string& target, const std::string& link) {
  if (::link(target.c_str(), link.c_str()) != 0) throw std::runtime_error("link " + link);
}

}  // namespace

TEST_CASE("stats.json and a lease that are hard links to a file outside the cache never write it",
          "[store][hostile][writes][links]") {
  test::TempDir outside;
  test::write_bytes(outside / "victim", "do not touch");
  test::set_age(outside / "victim", 3600);
  const std::int64_t victim_mtime = mtime_ns(outside / "victim");
  auto victim_intact = [&] {
    return test::read_bytes(outside / "victim") == "do not touch" && mtime_ns(outside / "victim") == victim_mtime;
  };

  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  make_hard_link(outside / "victim", dir / "stats.json");
  CHECK(store->lookup(test::store_key(31)).result == LookupResult::miss);  // counts a miss
  CHECK(victim_intact());
  // The counters now live in a file of the cache's own; the linked one was not trusted (zeros).
  CHECK(link_count(dir / "stats.json") == 1);
  CHECK(read_counters(*store)->misses == 1);

  // A lease that is a hard link to the victim: the load is served (the lease holds no bytes of the
  // entry) but never touches it, so the victim keeps its mtime.
  const Key key = test::store_key(32);
  REQUIRE(test::publish_raw(*store, key, test::raw_model(32)).result == PublishResult::published);
  const std::string lease = store->entry_path(key_id(key)) + "/lease";
  test::remove_path(lease);
  make_hard_link(outside / "victim", lease);
  {
    auto loaded = store->lookup(key);
    INFO(loaded.reason);
    CHECK(loaded.result == LookupResult::hit);
    CHECK(test::same_data(*loaded.snapshot, test::raw_model(32)));
  }
  CHECK(victim_intact());
  // A lease of its own (one name) is touched by each load, through the descriptor it was taken on.
  test::remove_path(lease);
  test::write_bytes(lease, "");
  test::set_age(lease, 3600);
  const std::int64_t before = mtime_ns(lease);
  CHECK(store->lookup(key).result == LookupResult::hit);
  CHECK(mtime_ns(lease) > before);
}

TEST_CASE("a verification stamp or digest memo with a second name is not trusted, and its other name is not "
          "written",
          "[store][hostile][links]") {
  test::TempDir outside, dir, checkpoint;
  auto store = *Store::open(test::test_config(dir.path()));

  SECTION("verified.snap") {
    const Key key = test::store_key(33);
    REQUIRE(test::publish_raw(*store, key, test::raw_model(33)).result == PublishResult::published);
    const std::string entry = store->entry_path(key_id(key));
    test::set_age(entry + "/data-0000.bin", 60);  // a new identity: the next load rehashes and stamps it
    REQUIRE(store->lookup(key).rehashed);
    REQUIRE_FALSE(store->lookup(key).rehashed);  // the stamp proves the new identity
    make_hard_link(entry + "/verified.snap", outside / "stamp");
    const std::string stamp_bytes = test::read_bytes(outside / "stamp");
    auto loaded = store->lookup(key);
    INFO(loaded.reason);
    CHECK(loaded.result == LookupResult::hit);
    CHECK(loaded.rehashed);  // a stamp someone else may write proves nothing
    CHECK(link_count(entry + "/verified.snap") == 1);  // replaced by a stamp of its own
    CHECK(test::read_bytes(outside / "stamp") == stamp_bytes);
    CHECK_FALSE(store->lookup(key).rehashed);
  }
  SECTION("digests.json") {
    const std::string file = checkpoint / "model.safetensors";
    test::write_bytes(file, "the checkpoint's bytes");
    auto files = *describe_checkpoint(store->fs(), {file});
    DigestMemo memo = store->digest_memo();
    REQUIRE(memo.fill_digests(files).is_ok());
    const std::string digest = files[0].content_digest;
    // A second name for the memo, through which its bytes are rewritten: a forged digest.
    make_hard_link(dir / "digests.json", outside / "memo");
    std::string text = test::read_bytes(outside / "memo");
    const std::string forged(digest.size(), 'f');
    text.replace(text.find(digest), digest.size(), forged);
    test::write_bytes(outside / "memo", text);
    REQUIRE(test::read_bytes(dir / "digests.json").find(forged) != std::string::npos);
    auto again = *describe_checkpoint(store->fs(), {file});
    DigestMemo fresh = store->digest_memo();
    REQUIRE(fresh.fill_digests(again).is_ok());
    CHECK(again[0].content_digest == digest);  // read from the file, not from the forged memo
    CHECK(fresh.bytes_hashed() > 0);
    CHECK(link_count(dir / "digests.json") == 1);
    CHECK(test::read_bytes(outside / "memo") == text);
  }
}

TEST_CASE("a FIFO as manifest, lease or settings file is refused at once instead of blocking", "[store][hostile][fifo]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  const Key fifo_manifest = test::store_key(7);
  const Key fifo_lease = test::store_key(8);
  REQUIRE(test::publish_raw(*store, fifo_manifest, test::raw_model(7)).result == PublishResult::published);
  REQUIRE(test::publish_raw(*store, fifo_lease, test::raw_model(8)).result == PublishResult::published);
  const std::string manifest = store->entry_path(key_id(fifo_manifest)) + "/manifest.snap";
  const std::string lease = store->entry_path(key_id(fifo_lease)) + "/lease";
  test::remove_path(manifest);
  make_fifo(manifest);
  test::remove_path(lease);
  make_fifo(lease);

  // A miss reads the key of every manifest to name the nearest entry; `ls` checks every entry.
  CHECK(within_seconds(20, [&] {
          auto miss = store->lookup(test::store_key(9));
          auto listed = list_entries(*store);
          return miss.result == LookupResult::miss && listed ? 0 : 1;
        }) == 0);
  CHECK(within_seconds(20, [&] { return store->lookup(fifo_manifest).result != LookupResult::hit ? 0 : 1; }) == 0);
  CHECK(within_seconds(20, [&] { return store->lookup(fifo_lease).result != LookupResult::hit ? 0 : 1; }) == 0);
  // What those loads moved to trash/ (an entry whose lease nobody can hold) is collected.
  CHECK(within_seconds(20, [&] {
          auto garbage = collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = false});
          return garbage && test::count_entries(dir / "trash") == 0 ? 0 : 1;
        }) == 0);
  // In this process too (the child's quarantines happened there): the reason names the FIFO.
  test::TempDir again;
  auto second = *Store::open(test::test_config(again.path()));
  REQUIRE(test::publish_raw(*second, fifo_manifest, test::raw_model(7)).result == PublishResult::published);
  const std::string manifest2 = second->entry_path(key_id(fifo_manifest)) + "/manifest.snap";
  test::remove_path(manifest2);
  make_fifo(manifest2);
  int code = within_seconds(20, [&] {
    auto loaded = second->lookup(fifo_manifest);
    return loaded.result == LookupResult::damaged && loaded.reason.find("FIFO") != std::string::npos ? 0 : 1;
  });
  CHECK(code == 0);

  const std::string settings = dir / "snapcache.conf";
  make_fifo(settings);
  CHECK(within_seconds(20, [&] {
          auto config = Config::load(settings);
          return !config && config.status().message().find("FIFO") != std::string::npos ? 0 : 1;
        }) == 0);
}

TEST_CASE("a 1 TiB sparse stats.json, manifest, stamp or settings file is refused with the reason, not allocated",
          "[store][hostile][sparse]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  const Key key = test::store_key(10);
  test::RawModel model = test::raw_model(10);
  REQUIRE(test::publish_raw(*store, key, model).result == PublishResult::published);

  SECTION("stats.json: counting starts over in a small file") {
    make_sparse(dir / "stats.json", kTiB);
    auto loaded = store->lookup(key);
    CHECK(loaded.result == LookupResult::hit);
    CHECK(test::file_size(dir / "stats.json") < 4096);
    auto counters = read_counters(*store);
    REQUIRE(counters);
    CHECK(counters->hits == 1);
  }
  SECTION("verified.snap: ignored, the data is rehashed") {
    make_sparse(store->entry_path(key_id(key)) + "/verified.snap", kTiB);
    auto loaded = store->lookup(key);
    INFO(loaded.reason);
    REQUIRE(loaded.result == LookupResult::hit);
    CHECK(test::same_data(*loaded.snapshot, model));
  }
  SECTION("manifest.snap: damage, named") {
    const std::string manifest = store->entry_path(key_id(key)) + "/manifest.snap";
    test::remove_path(manifest);
    make_sparse(manifest, kTiB);
    auto miss = store->lookup(test::store_key(11));  // reads the key at the front of every manifest
    CHECK(miss.result == LookupResult::miss);
    auto listed = list_entries(*store);
    REQUIRE(listed);
    auto loaded = store->lookup(key);
    INFO(loaded.reason);
    CHECK(loaded.result == LookupResult::damaged);
    CHECK(loaded.reason.find("more than") != std::string::npos);
  }
  SECTION("settings file: an error that says so") {
    make_sparse(dir / "snapcache.conf", kTiB);
    auto config = Config::load(dir / "snapcache.conf");
    REQUIRE_FALSE(config);
    CHECK(config.status().message().find("more than") != std::string::npos);
  }
}

TEST_CASE("a directory that is not a snapcache cache is refused and left as it was", "[store][hostile][foreign]") {
  test::TempDir home;
  ::mkdir((home / "tmp").c_str(), 0755);
  test::write_bytes(home / "tmp/work", "mine");
  test::write_bytes(home / "notes", "mine");
  auto opened = Store::open(test::test_config(home.path()));
  REQUIRE_FALSE(opened);
  CHECK(opened.status().code() == StatusCode::foreign);
  CHECK(opened.status().message().find("not a snapcache cache") != std::string::npos);
  CHECK_FALSE(test::path_exists(home / "entries"));
  CHECK_FALSE(test::path_exists(home / "trash"));
  CHECK_FALSE(test::path_exists(home / "CACHEDIR.TAG"));
  CHECK(test::read_bytes(home / "tmp/work") == "mine");

  // Another program's cache carries the standard tag, without snapcache's line.
  test::TempDir other;
  test::write_bytes(other / "CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n# other tool\n");
  CHECK_FALSE(Store::open(test::test_config(other.path())));
}

TEST_CASE("an empty or absent directory becomes a cache, and a cache made by earlier releases opens",
          "[store][hostile][adopt]") {
  test::TempDir dir;
  REQUIRE(Store::open(test::test_config(dir.path())));  // empty
  CHECK(test::read_bytes(dir / "CACHEDIR.TAG").find("snapcache cache") != std::string::npos);
  auto absent = Store::open(test::test_config(dir / "new/cache"));
  REQUIRE(absent);
  // The cache path itself may be a link the user made (~/.cache/snapcache -> /data/snapcache).
  test::TempDir elsewhere;
  make_symlink(dir.path(), elsewhere / "cache");
  REQUIRE(Store::open(test::test_config(elsewhere / "cache")));

  // What earlier releases wrote: the three directories, then this tag, and an operator's notes.
  test::TempDir earlier;
  for (const char* sub : {"entries", "tmp", "trash"}) ::mkdir((earlier / sub).c_str(), 0755);
  test::write_bytes(earlier / "CACHEDIR.TAG",
                    "Signature: 8a477f597d28d172789f06886806bc55\n"
                    "# This directory is a snapcache cache; see https://bford.info/cachedir/\n");
  test::write_bytes(earlier / "notes", "mine");
  auto store = Store::open(test::test_config(earlier.path()));
  REQUIRE(store);
  REQUIRE(test::publish_raw(**store, test::store_key(12), test::raw_model(12)).result == PublishResult::published);
  auto reopened = Store::open(test::test_config(earlier.path()));
  REQUIRE(reopened);
  CHECK((*reopened)->lookup(test::store_key(12)).result == LookupResult::hit);
}

TEST_CASE("a cache writable by others, owned by another user or with a linked trash/ is refused with the reason",
          "[store][hostile][owner]") {
  test::TempDir dir;
  REQUIRE(Store::open(test::test_config(dir.path())));

  ::chmod(dir.path().c_str(), 0777);
  auto shared = Store::open(test::test_config(dir.path()));
  REQUIRE_FALSE(shared);
  CHECK(shared.status().code() == StatusCode::permission_denied);
  CHECK(shared.status().message().find("chmod go-w") != std::string::npos);
  ::chmod(dir.path().c_str(), 0700);

  ::chmod((dir / "trash").c_str(), 0770);
  CHECK_FALSE(Store::open(test::test_config(dir.path())));
  ::chmod((dir / "trash").c_str(), 0755);
  REQUIRE(Store::open(test::test_config(dir.path())));

  Outside outside;
  test::remove_path(dir / "trash");
  make_symlink(outside.dir.path(), dir / "trash");
  auto linked = Store::open(test::test_config(dir.path()));
  REQUIRE_FALSE(linked);
  CHECK(linked.status().message().find("symbolic link") != std::string::npos);
  CHECK(outside.intact());
  test::remove_path(dir / "trash");

  if (::geteuid() == 0) {  // only root can give a directory away
    REQUIRE(::chown(dir.path().c_str(), 4242, 4242) == 0);
    auto foreign = Store::open(test::test_config(dir.path()));
    REQUIRE_FALSE(foreign);
    CHECK(foreign.status().message().find("owned by uid 4242") != std::string::npos);
  }
}

TEST_CASE("published entry files are read-only", "[store][hostile][read-only]") {
  test::TempDir dir;
  auto store = *Store::open(test::test_config(dir.path()));
  const Key key = test::store_key(13);
  REQUIRE(test::publish_raw(*store, key, test::raw_model(13)).result == PublishResult::published);
  const std::string entry = store->entry_path(key_id(key));
  CHECK(permissions(entry + "/data-0000.bin") == 0444);
  CHECK(permissions(entry + "/manifest.snap") == 0444);
  CHECK(permissions(entry + "/lease") == 0444);
  // Loads still lease, touch and map it.
  auto loaded = store->lookup(key);
  REQUIRE(loaded.result == LookupResult::hit);
  CHECK(test::same_data(*loaded.snapshot, test::raw_model(13)));
}

TEST_CASE("a data file swapped after the entry check is never certified: the bytes hashed are the bytes mapped",
          "[store][hostile][swap]") {
  test::TempDir dir;
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  auto store = *Store::open(test::test_config(dir.path()), fs);
  test::RawModel tensors = test::raw_model(17, 4);
  Key key = test::store_key(17);
  const std::string data = store->entry_path(key_id(key)) + "/data-0000.bin";
  const std::string good = dir.path() + "/good-copy.bin";
  for (const char* who : {"load", "verify"}) {
    INFO(who);
    REQUIRE(test::publish_raw(*store, key, tensors).result == PublishResult::published);
    // The entry's data file is damaged (so its identity changed and it must be rehashed); a good
    // copy of it takes its name right after the entry check opened it.
    test::write_bytes(good, test::read_bytes(data));
    test::flip_byte(data, 100);
    fs->after_open("data-0000.bin", [&] { test::rename_path(good, data); });
    if (std::string(who) == "load") {
      auto loaded = store->lookup(key);
      INFO(loaded.reason);
      CHECK(loaded.result == LookupResult::damaged);
      CHECK(loaded.snapshot == nullptr);
    } else {
      auto report = verify_entry(*store, key_id(key));
      CHECK(report.status.code() == StatusCode::damaged);
      CHECK(report.damaged_chunks.size() == 1);
      REQUIRE(quarantine(*store, key_id(key), "test").is_ok());
    }
    fs->clear_faults();
    // Nothing certified the damaged file: no stamp vouches for it, the next load does not hit it.
    CHECK(store->lookup(key).result != LookupResult::hit);
  }
}
