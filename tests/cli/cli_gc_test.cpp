// snapcache gc: dead writers' leftovers, stray files, junk of any depth and stale entries go;
// publications in progress and entries in use stay, and what cannot be removed is said.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "cli_fixtures.h"
#include "cli_runner.h"
#include "store/layout.h"
#include "support/catch.h"
#include "snapcache/key.h"

using namespace snapcache;
using namespace snapcache::test;

namespace {

// A publication directory as a writer leaves it while it works (or after it died).
// An unfinished publication whose writer had locked and marked its lease (`marked`), or one that
// may still be about to (an empty lease).
std::string make_unfinished(Cache& cache, const std::string& name, bool marked = true) {
  const std::string path = cache.path() + "/tmp/" + name;
  REQUIRE(make_directories(cache.store->fs(), path).is_ok());
  write_bytes(path + "/lease", marked ? std::string(store::kLeaseTakenMark) : "");
  write_bytes(path + "/data-0000.bin", std::string(5000, 'x'));
  return path;
}

// The line of a command's output that names `part` ("" when none does).
std::string line_with(const std::string& out, const std::string& part) {
  std::size_t at = out.find(part);
  if (at == std::string::npos) return {};
  std::size_t begin = out.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return out.substr(begin, out.find('\n', at) - begin);
}

}  // namespace

TEST_CASE("cli gc leaves a publication in progress alone and removes what no one will finish", "[cli][gc]") {
  Cache cache;
  const std::string id = cache.publish(21);
  const std::string other = std::string(32, 'a');

  // In progress: its writer holds the lease, even though it is older than the grace period.
  const std::string writing = make_unfinished(cache, other + ".100-0-live");
  int lease = ::open((writing + "/lease").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(lease >= 0);
  REQUIRE(::flock(lease, LOCK_EX | LOCK_NB) == 0);
  set_age(writing, 3 * 3600);
  // Dead writer, long ago.
  const std::string dead = make_unfinished(cache, other + ".101-0-dead");
  set_age(dead, 3 * 3600);
  // Unlocked but fresh: its writer is gone, but it is younger than the grace period.
  const std::string fresh = make_unfinished(cache, other + ".102-0-new");
  // Unlocked, unmarked and fresh: perhaps a writer between creating its lease and locking it.
  const std::string starting = make_unfinished(cache, other + ".103-0-starting", /*marked=*/false);
  // Files that belong to no entry, old and new.
  const std::string stray_entry_file = cache.store->entry_path(id) + "/verified.snap.tmp.999.0";
  write_bytes(stray_entry_file, "torn");
  set_age(stray_entry_file, 2 * 86400);
  const std::string stray_in_entries = cache.path() + "/entries/notes.txt";
  write_bytes(stray_in_entries, "hello");
  set_age(stray_in_entries, 2 * 86400);
  const std::string stray_leftover = cache.path() + "/stats.json.tmp.999.3";
  write_bytes(stray_leftover, "{");
  set_age(stray_leftover, 2 * 86400);
  const std::string new_stray = cache.path() + "/entries/just-now.txt";
  write_bytes(new_stray, "hi");
  const std::string operators_file = cache.path() + "/README.operator";
  write_bytes(operators_file, "ours, not the cache's");
  set_age(operators_file, 30 * 86400);

  auto dry = run_cli(with_dir(cache, {"gc", "--dry-run", "--json"}));
  INFO(dry.out << dry.err);
  CHECK(dry.exit_code == 0);
  CHECK(dry.json()["removed"].size() == 4);
  CHECK(path_exists(dead));

  auto run = run_cli(with_dir(cache, {"gc", "--json"}));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  auto j = run.json();
  CHECK(j["dry_run"] == false);
  CHECK(j["grace_seconds"] == 3600);
  std::set<std::string> removed;
  for (const auto& item : j["removed"]) removed.insert(item["path"].get<std::string>());
  CHECK(removed == std::set<std::string>{dead, stray_entry_file, stray_in_entries, stray_leftover});
  CHECK(j["bytes_freed"].get<std::uint64_t>() >= 5000);
  std::set<std::string> kept;
  for (const auto& item : j["kept_unfinished"]) kept.insert(item["path"].get<std::string>());
  CHECK(kept == std::set<std::string>{writing, fresh, starting});

  CHECK(path_exists(writing + "/data-0000.bin"));
  CHECK(path_exists(fresh));
  CHECK(path_exists(new_stray));
  CHECK(path_exists(operators_file));
  CHECK_FALSE(path_exists(dead));
  CHECK_FALSE(path_exists(stray_entry_file));
  // The entry itself is untouched and still loads.
  CHECK(cache.store->lookup(store_key(21)).result == LookupResult::hit);

  // Without a grace period the fresh leftovers go too; the locked publication still stays, and so
  // does one whose writer may be about to lock its lease (it gets the hour a leaseless one does).
  auto now = run_cli(with_dir(cache, {"gc", "--grace", "0"}));
  INFO(now.out);
  CHECK(now.exit_code == 0);
  CHECK(contains(now.out, "removed"));
  CHECK(contains(now.out, "kept"));
  CHECK_FALSE(path_exists(fresh));
  CHECK_FALSE(path_exists(new_stray));
  CHECK(path_exists(writing + "/data-0000.bin"));
  CHECK(path_exists(starting + "/data-0000.bin"));
  set_age(starting, 2 * 3600);
  CHECK(run_cli(with_dir(cache, {"gc", "--grace", "0"})).exit_code == 0);
  CHECK_FALSE(path_exists(starting));
  ::close(lease);
}

TEST_CASE("cli gc reports every removal, and a file where the cache keeps a directory is junk, not an error",
          "[cli][gc]") {
  Cache cache;
  const std::string id = cache.publish(22);
  const std::string dead = make_unfinished(cache, std::string(32, 'b') + ".104-0-dead");
  set_age(dead, 2 * 3600);
  // misses/ as a regular file, and a file in trash/ where a removed entry's directory would be.
  const std::string misses = cache.path() + "/misses";
  write_bytes(misses, "not a directory");
  const std::string in_trash = cache.path() + "/trash/" + std::string(32, 'c') + ".105-0-x";
  write_bytes(in_trash, std::string(300, 'y'));

  auto dry = run_cli(with_dir(cache, {"gc", "--dry-run"}));
  INFO(dry.out << dry.err);
  CHECK(dry.exit_code == 0);
  CHECK(path_exists(dead));

  auto run = run_cli(with_dir(cache, {"gc", "--json"}));
  INFO(run.out << run.err);
  // It was exit 5 ("not a directory") after removing the dead writer's leftover without a word.
  REQUIRE(run.exit_code == 0);
  std::map<std::string, std::pair<std::string, std::uint64_t>> removed;
  const auto j = run.json();
  for (const auto& item : j["removed"])
    removed[item["path"].get<std::string>()] = {item["reason"].get<std::string>(), item["bytes"].get<std::uint64_t>()};
  REQUIRE(removed.size() == 3);
  CHECK(removed[dead].first == "unfinished publication, its writer is gone");
  CHECK(removed[dead].second >= 5000);
  CHECK(removed[misses] == std::make_pair(std::string("a file where misses/ should be a directory"), std::uint64_t{15}));
  CHECK(removed[in_trash] ==
        std::make_pair(std::string("a file in trash/, where removed entries are directories"), std::uint64_t{300}));
  CHECK_FALSE(path_exists(dead));
  CHECK_FALSE(path_exists(misses));
  CHECK_FALSE(path_exists(in_trash));
  // The next miss makes misses/ again; the entry is untouched.
  CHECK(cache.store->lookup(store_key(23)).result == LookupResult::miss);
  CHECK(path_exists(misses + "/" + key_id(store_key(23)) + ".key"));
  CHECK(cache.store->lookup(store_key(22)).result == LookupResult::hit);
}

TEST_CASE("cli gc removes a misses/ that is a link itself and never what it points to", "[cli][gc][hostile]") {
  Cache cache;
  cache.publish(24);
  TempDir outside;
  write_bytes(outside / "notes.txt", "someone's file");
  set_age(outside / "notes.txt", 2 * 86400);
  const std::string misses = cache.path() + "/misses";
  REQUIRE(::symlink(outside.path().c_str(), misses.c_str()) == 0);

  auto run = run_cli(with_dir(cache, {"gc"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(contains(run.out, "removed  " + misses));
  CHECK(contains(run.out, "a symbolic link where misses/ should be a directory"));
  CHECK(contains(run.out, "removed 1 item"));
  CHECK(read_bytes(outside / "notes.txt") == "someone's file");  // gc listed the link and removed it
  CHECK_FALSE(path_exists(misses));
}

TEST_CASE("cli gc removes stale entries unused for the grace period, leaves one in use, and a dry run removes nothing",
          "[cli][gc][stale]") {
  Cache cache;
  const Key fresh_key = cache.reachable_key(31);
  const std::string fresh = cache.publish(fresh_key, 31);
  const std::string stale = cache.publish(cache.reachable_key(32), 32);
  const std::string stale_in_use = cache.publish(cache.reachable_key(33), 33);
  // Rewritten with other bytes (another size), so no load can be served by its entry.
  write_bytes(cache.checkpoint_file(32), std::string(4096, 'x'));
  REQUIRE(::unlink(cache.checkpoint_file(33).c_str()) == 0);
  int lease = ::open(cache.lease_path(stale_in_use).c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(lease >= 0);
  REQUIRE(::flock(lease, LOCK_SH | LOCK_NB) == 0);  // as a process that loaded it holds it
  CHECK(contains(run_cli(with_dir(cache, {"ls"})).out, "ok, stale"));

  auto paths = [](const nlohmann::json& items) {
    std::set<std::string> out;
    for (const auto& i : items) out.insert(i["path"].get<std::string>());
    return out;
  };
  // Used just now: the hour of grace keeps them.
  auto graced = run_cli(with_dir(cache, {"gc", "--json"}));
  INFO(graced.out << graced.err);
  REQUIRE(graced.exit_code == 0);
  CHECK(graced.json()["removed"].empty());
  CHECK(path_exists(cache.store->entry_path(stale)));

  const std::string before = tree_snapshot(cache.path());
  auto dry = run_cli(with_dir(cache, {"gc", "--dry-run", "--grace", "0", "--json"}));
  INFO(dry.out << dry.err);
  REQUIRE(dry.exit_code == 0);
  const auto would = dry.json();
  CHECK(paths(would["removed"]) == std::set<std::string>{cache.store->entry_path(stale)});
  REQUIRE(would["removed"].size() == 1);
  CHECK(contains(would["removed"][0]["reason"].get<std::string>(),
                 "stale entry: checkpoint " + cache.checkpoint_file(32) + " changed since the entry was made"));
  CHECK(would["removed"][0]["bytes"].get<std::uint64_t>() > (1u << 20));
  CHECK(paths(would["kept_in_use"]) == std::set<std::string>{cache.store->entry_path(stale_in_use)});
  CHECK(tree_snapshot(cache.path()) == before);

  auto run = run_cli(with_dir(cache, {"gc", "--grace", "0"}));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const std::string kept_line = line_with(run.out, cache.store->entry_path(stale_in_use));
  CHECK(kept_line.starts_with("kept "));
  CHECK(contains(kept_line, "stale entry: checkpoint " + cache.checkpoint_file(33) + " is gone"));
  CHECK(contains(kept_line, "leased by pid " + std::to_string(::getpid())));
  CHECK(line_with(run.out, cache.store->entry_path(stale)).starts_with("removed "));
  CHECK(contains(run.out, "removed 1 item"));
  CHECK_FALSE(path_exists(cache.store->entry_path(stale)));
  CHECK(path_exists(cache.store->entry_path(stale_in_use)));
  CHECK(cache.store->lookup(fresh_key).result == LookupResult::hit);
  CHECK(path_exists(cache.store->entry_path(fresh)));

  // Once its last user lets go, it goes too.
  ::close(lease);
  auto after = run_cli(with_dir(cache, {"gc", "--grace", "0", "--json"}));
  INFO(after.out << after.err);
  REQUIRE(after.exit_code == 0);
  CHECK(paths(after.json()["removed"]) == std::set<std::string>{cache.store->entry_path(stale_in_use)});
  CHECK_FALSE(path_exists(cache.store->entry_path(stale_in_use)));
  CHECK(path_exists(cache.store->entry_path(fresh)));
}

namespace {

// A chain of `depth` directories named "d" made below `top`, fd-relative (its paths are far longer
// than PATH_MAX), holding at the bottom a file of `bottom` bytes, a link to `outside` and a link to
// a file in it.
void make_deep_tree(const std::string& top, int depth, const std::string& bottom, const std::string& outside) {
  REQUIRE(::mkdir(top.c_str(), 0755) == 0);
  int fd = ::open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  for (int i = 0; i < depth; ++i) {
    int next = ::mkdirat(fd, "d", 0755) == 0 ? ::openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    ::close(fd);
    if (next < 0) FAIL("making level " << i << ": " << std::strerror(errno));
    fd = next;
  }
  int file = ::openat(fd, "bottom.bin", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  REQUIRE(file >= 0);
  REQUIRE(::write(file, bottom.data(), bottom.size()) == static_cast<ssize_t>(bottom.size()));
  ::close(file);
  REQUIRE(::symlinkat(outside.c_str(), fd, "out") == 0);
  REQUIRE(::symlinkat((outside + "/notes.txt").c_str(), fd, "notes") == 0);
  ::close(fd);
}

// Lowers this process's descriptor limit for what it starts meanwhile (children inherit it).
class DescriptorLimit {
 public:
  explicit DescriptorLimit(rlim_t limit) {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min(limit, saved_.rlim_cur);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  }
  ~DescriptorLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

// chattr +i / -i through the ioctl chattr uses; false where the file system or the user may not.
bool set_immutable(const std::string& path, bool on) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  int flags = 0;
  bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  if (ok) {
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    ok = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  }
  ::close(fd);
  return ok;
}

// Clears the immutable attribute it set, so the temporary directory can go whatever the test did.
struct Immutable {
  std::vector<std::string> paths;
  bool set(const std::string& path) {
    if (!set_immutable(path, true)) return false;
    paths.push_back(path);
    return true;
  }
  ~Immutable() {
    for (const auto& p : paths) set_immutable(p, false);
  }
};

}  // namespace

TEST_CASE("cli gc removes a tree in trash/ of any depth, and never what a link in it points to",
          "[cli][gc][hostile]") {
  Cache cache;
  const Key key = cache.reachable_key(34);
  cache.publish(key, 34);
  TempDir outside;
  write_bytes(outside / "notes.txt", "someone's file");
  // Far deeper than the descriptors the command may hold (the limit set below): a walk that kept a
  // descriptor per level could not finish it. Deeper trees take longer only in proportion: on
  // ext4 each level's removal costs what `rm -rf` pays for it.
  constexpr int kDepth = 20'000;
  const std::string deep = cache.path() + "/trash/" + std::string(32, 'd') + ".106-0-deep";
  auto made = std::chrono::steady_clock::now();
  make_deep_tree(deep, kDepth, std::string(1234, 'z'), outside.path());
  const double make_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - made).count();
  const std::string link = cache.path() + "/trash/" + std::string(32, 'e') + ".107-0-link";
  REQUIRE(::symlink(outside.path().c_str(), link.c_str()) == 0);

  std::map<std::string, std::uint64_t> bytes;
  auto dry = run_cli(with_dir(cache, {"gc", "--dry-run", "--json"}));
  INFO(dry.out << dry.err);
  REQUIRE(dry.exit_code == 0);
  const auto dry_json = dry.json();
  for (const auto& item : dry_json["removed"]) bytes[item["path"].get<std::string>()] = item["bytes"];
  CHECK(bytes == std::map<std::string, std::uint64_t>{{deep, 1234}, {link, 0}});  // the bottom counts
  CHECK(path_exists(deep));

  CliRun run;
  double gc_seconds = 0;
  {
    DescriptorLimit limit(256);
    auto started = std::chrono::steady_clock::now();
    run = run_cli(with_dir(cache, {"gc", "--json"}));
    gc_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
  INFO(run.out << run.err);
  WARN("a tree " << kDepth << " levels deep: made in " << make_seconds << " s; gc (measured, then removed) in "
                 << gc_seconds << " s");
  REQUIRE(run.exit_code == 0);
  bytes.clear();
  const auto run_json = run.json();
  for (const auto& item : run_json["removed"]) bytes[item["path"].get<std::string>()] = item["bytes"];
  CHECK(bytes == std::map<std::string, std::uint64_t>{{deep, 1234}, {link, 0}});
  CHECK(run_json["failed"].empty());
  CHECK_FALSE(path_exists(deep));
  CHECK_FALSE(path_exists(link));
  CHECK(test::list_names(cache.path() + "/trash").empty());
  CHECK(read_bytes(outside / "notes.txt") == "someone's file");  // the links went, not their targets
  CHECK(cache.store->lookup(key).result == LookupResult::hit);
}

TEST_CASE("cli gc says what it cannot remove and why, removes the rest, and exits 5", "[cli][gc]") {
  Cache cache;
  // A file in trash/ (junk), and a removed entry 20 levels deep with a file at every level, the
  // bottom one immutable.
  const std::string junk = cache.path() + "/trash/" + std::string(32, 'f') + ".108-0-file";
  write_bytes(junk, std::string(300, 'j'));
  const std::string tree = cache.path() + "/trash/" + std::string(32, '9') + ".109-0-tree";
  std::string level = tree;
  std::vector<std::string> files;
  for (int i = 0; i < 20; ++i) {
    REQUIRE(make_directories(cache.store->fs(), level).is_ok());
    files.push_back(level + "/data-" + std::to_string(i) + ".bin");
    write_bytes(files.back(), std::string(100, 'x'));
    level += "/d";
  }
  Immutable immutable;
  if (!immutable.set(junk) || !immutable.set(files.back())) {
    WARN("skipped: cannot make a file immutable here (chattr +i needs root and a file system that has it)");
    return;
  }

  auto dry = run_cli(with_dir(cache, {"gc", "--dry-run", "--json"}));
  INFO(dry.out << dry.err);
  REQUIRE(dry.exit_code == 0);
  CHECK(dry.json()["removed"].size() == 2);

  auto run = run_cli(with_dir(cache, {"gc", "--json"}));
  INFO(run.out << run.err);
  CHECK(run.exit_code == 5);
  const auto j = run.json();
  CHECK(j["removed"].empty());
  std::map<std::string, std::string> failed;
  for (const auto& item : j["failed"]) failed[item["path"].get<std::string>()] = item["error"].get<std::string>();
  REQUIRE(failed.size() == 2);
  CHECK(contains(failed[junk], "Operation not permitted"));
  CHECK(contains(failed[junk], "chattr -i"));
  // The error names what refused, below the tree's top.
  CHECK(contains(failed[tree], files.back()));
  CHECK(contains(failed[tree], "Operation not permitted"));
  // What could go went: every file but the immutable one. What holds it stays, and is counted.
  for (std::size_t i = 0; i + 1 < files.size(); ++i) CHECK_FALSE(path_exists(files[i]));
  CHECK(path_exists(files.back()));
  CHECK(path_exists(junk));
  for (const auto& item : j["failed"]) CHECK(item["bytes"].get<std::uint64_t>() == (item["path"] == junk ? 300 : 100));

  auto text = run_cli(with_dir(cache, {"gc"}));
  INFO(text.out << text.err);
  CHECK(text.exit_code == 5);
  CHECK(contains(text.out, "FAILED  " + junk));
  CHECK(contains(text.out, "removed 0 items"));
  CHECK(contains(text.out, "2 items could not be removed"));

  // Once the attribute is cleared, the next gc takes both.
  for (const auto& p : immutable.paths) REQUIRE(set_immutable(p, false));
  auto again = run_cli(with_dir(cache, {"gc"}));
  INFO(again.out << again.err);
  CHECK(again.exit_code == 0);
  CHECK(contains(again.out, "removed 2 items"));
  CHECK(test::list_names(cache.path() + "/trash").empty());
}
