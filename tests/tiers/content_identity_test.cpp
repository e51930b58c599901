// Checkpoint identity that survives copying: with content hashing on, an entry published from a
// checkpoint at one path hits in a new process whose checkpoint has the same bytes at another path
// (another inode, other times); other bytes miss naming the digest; without content hashing a copy
// is another checkpoint. The loads that must hit or miss run in a second process (this test binary
// again, running the hidden "[.child]" case), as on another node.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "support/demo_fixture.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"
#include "snapcache/maintenance.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "support/env_guard.h"
#include "support/fixtures.h"
#include "support/temp_dir.h"

using namespace snapcache;

namespace {

constexpr const char* kCheckpointVar = "SNAPCACHE_TEST_CHILD_CHECKPOINT";
constexpr const char* kCacheVar = "SNAPCACHE_TEST_CHILD_CACHE";
constexpr const char* kHashVar = "SNAPCACHE_TEST_CHILD_HASH";

LoadPlan plan_for(const std::string& checkpoint, bool hash_contents) {
  LoadPlan plan = demo::make_plan(test::small_dit_config(), checkpoint, c10::Device(c10::kCPU));
  plan.hash_checkpoint_contents = hash_contents;
  return plan;
}

std::string fingerprint_of(const LoadedModel& model) {
  return demo::fingerprint(model, demo::forward(test::small_dit_config(), model));
}

struct ChildLoad {
  std::string path;  // "hit", "miss", ...
  std::string reason;
  std::string fingerprint;
};

// Loads `checkpoint` through the cache at `cache` in a new process.
ChildLoad load_in_new_process(const std::string& checkpoint, const std::string& cache, bool hash_contents) {
  test::EnvGuard env;
  env.set(kCheckpointVar, checkpoint);
  env.set(kCacheVar, cache);
  env.set(kHashVar, hash_contents ? "1" : "0");
  std::string self(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size());
  REQUIRE(n > 0);
  self.resize(static_cast<std::size_t>(n));
  test::ChildProcess child(self, {"content identity: the load of a second process"});
  ChildLoad out;
  REQUIRE(child.wait_for_line("LOAD "));
  const std::string load = child.last_line().substr(5);
  out.path = load.substr(0, load.find(' '));
  out.reason = load.substr(load.find(' ') + 1);
  REQUIRE(child.wait_for_line("FINGERPRINT "));
  out.fingerprint = child.last_line().substr(12);
  CHECK(child.wait() == 0);
  return out;
}

// Publishes the demo checkpoint at `checkpoint` into `cache` in this process; returns the model.
LoadedModel publish(const std::string& checkpoint, const std::string& cache, bool hash_contents) {
  auto store = *Store::open(test::test_config(cache), posix_file_system());
  auto model = load_model(store.get(), plan_for(checkpoint, hash_contents));
  REQUIRE(model.is_ok());
  REQUIRE(model->report.path == LoadPath::miss);
  PublicationReport published =
      model->report.publish ? *model->report.publish : model->publication.wait();
  REQUIRE(published.outcome() == std::string_view("published"));
  return std::move(*model);
}

// The demo checkpoint at a/, published from there into the cache, then copied to b/: same bytes,
// another path and inode, a new mtime and ctime.
struct CopiedCheckpoint {
  test::TempDir dir;
  std::string at_a = dir / "a/model.safetensors";
  std::string at_b = dir / "b/model.safetensors";
  std::string cache = dir / "cache";
  LoadedModel built;

  explicit CopiedCheckpoint(bool hash_contents) {
    REQUIRE(::mkdir((dir / "a").c_str(), 0755) == 0);
    REQUIRE(::mkdir((dir / "b").c_str(), 0755) == 0);
    REQUIRE(demo::write_checkpoint(test::small_dit_config(), at_a).is_ok());
    built = publish(at_a, cache, hash_contents);
    test::write_bytes(at_b, test::read_bytes(at_a));
    struct stat a {}, b {};
    REQUIRE(::stat(at_a.c_str(), &a) == 0);
    REQUIRE(::stat(at_b.c_str(), &b) == 0);
    REQUIRE(a.st_ino != b.st_ino);
  }
};

}  // namespace

// The second process: one load, its path and reason and what it loaded printed for the parent.
TEST_CASE("content identity: the load of a second process", "[.child]") {
  const char* checkpoint = std::getenv(kCheckpointVar);
  const char* cache = std::getenv(kCacheVar);
  const char* hash = std::getenv(kHashVar);
  REQUIRE(checkpoint != nullptr);
  REQUIRE(cache != nullptr);
  auto store = *Store::open(test::test_config(cache), posix_file_system());
  auto model = load_model(store.get(), plan_for(checkpoint, hash != nullptr && std::string(hash) == "1"));
  REQUIRE(model.is_ok());
  (void)model->publication.wait();
  std::printf("LOAD %s %s\nFINGERPRINT %s\n", to_string(model->report.path), model->report.reason.c_str(),
              fingerprint_of(*model).c_str());
  std::fflush(stdout);
}

TEST_CASE("with content hashing, a copy of the checkpoint at another path hits in a new process, and other bytes miss as "
          "another checkpoint's first load",
          "[pipeline][content-identity]") {
  const CopiedCheckpoint f(/*hash_contents=*/true);
  ChildLoad copied = load_in_new_process(f.at_b, f.cache, /*hash_contents=*/true);
  CHECK(copied.path == "hit");
  CHECK(copied.fingerprint == fingerprint_of(f.built));
  // The entry records the bytes, not where they were.
  auto store = *Store::open(test::test_config(f.cache), posix_file_system());
  wait_for_publications();
  auto entries = list_entries(*store);
  REQUIRE(entries.is_ok());
  REQUIRE(entries->size() == 1);
  REQUIRE((*entries)[0].manifest.has_value());
  const CheckpointFile& stored = (*entries)[0].manifest->key.checkpoint.at(0);
  CHECK(stored.path.empty());
  CHECK(stored.size == test::file_size(f.at_a));
  CHECK(stored.content_digest.size() == 32);

  // One byte changed at B, same size, mtime put back: the ctime still moves, so the digest is
  // taken again, and the load misses naming it.
  struct stat before {};
  REQUIRE(::stat(f.at_b.c_str(), &before) == 0);
  test::flip_byte(f.at_b, test::file_size(f.at_b) - 1);
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, f.at_b.c_str(), times, 0) == 0);
  ChildLoad changed = load_in_new_process(f.at_b, f.cache, /*hash_contents=*/true);
  CHECK(changed.path == "miss");
  // Keyed by content, other bytes are another checkpoint: no entry of it yet, this model's first load.
  CHECK(changed.reason.find("for this checkpoint yet: this model's first load") != std::string::npos);
  CHECK(changed.reason.find(f.at_b) == std::string::npos);  // never a path
  CHECK(changed.fingerprint != fingerprint_of(f.built));
}

TEST_CASE("without content hashing, a copy of the checkpoint at another path misses as that checkpoint's first load",
          "[pipeline][content-identity]") {
  const CopiedCheckpoint f(/*hash_contents=*/false);
  ChildLoad copied = load_in_new_process(f.at_b, f.cache, /*hash_contents=*/false);
  CHECK(copied.path == "miss");
  // Keyed by path, the copy is another checkpoint: no entry of it yet, this model's first load.
  CHECK(copied.reason.find("for this checkpoint yet: this model's first load") != std::string::npos);
  CHECK(copied.fingerprint == fingerprint_of(f.built));  // the same weights, loaded the ordinary way
}

TEST_CASE("without content hashing, a touched checkpoint loads as a hit in a new process and the cache keeps one entry",
          "[pipeline][content-identity]") {
  const CopiedCheckpoint f(/*hash_contents=*/false);
  // Before the file changes: the model built from it may map its bytes.
  const std::string built = fingerprint_of(f.built);
  // `touch`: new times, the same bytes.
  struct stat st {};
  REQUIRE(::stat(f.at_a.c_str(), &st) == 0);
  const struct timespec later[2] = {{st.st_atim.tv_sec + 60, 0}, {st.st_mtim.tv_sec + 60, 0}};
  REQUIRE(::utimensat(AT_FDCWD, f.at_a.c_str(), later, 0) == 0);
  ChildLoad touched = load_in_new_process(f.at_a, f.cache, /*hash_contents=*/false);
  CHECK(touched.path == "hit");
  CHECK(touched.reason.find("1 checkpoint file changed identity since entry") != std::string::npos);
  CHECK(touched.fingerprint == built);
  auto store = *Store::open(test::test_config(f.cache), posix_file_system());
  wait_for_publications();
  CHECK(list_entries(*store).value().size() == 1);

  // One byte changed, mtime put back: other bytes, so a miss, and the new entry is the one published.
  test::flip_byte(f.at_a, test::file_size(f.at_a) - 1);
  REQUIRE(::utimensat(AT_FDCWD, f.at_a.c_str(), later, 0) == 0);
  ChildLoad changed = load_in_new_process(f.at_a, f.cache, /*hash_contents=*/false);
  CHECK(changed.path == "miss");
  CHECK(changed.reason.find("nearest entry") != std::string::npos);
  CHECK(changed.fingerprint != built);
}
