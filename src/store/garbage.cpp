// Garbage collection: unfinished publications whose writer is gone, removed entries waiting in
// trash/, and files in the cache directory that belong to no entry.
#include <algorithm>
#include <array>

#include "format/manifest.h"
#include "snapcache/maintenance.h"
#include "store/layout.h"
#include "util/clock.h"
#include "util/file_io.h"

namespace snapcache {
namespace {

constexpr std::int64_t kNsPerSecond = 1'000'000'000;
// A publication creates its directory and then, at once, its locked lease file. One without a
// lease file is a writer that died in between, or one that is just slow: give it an hour.
constexpr std::int64_t kLeaselessGraceNs = 3600ll * kNsPerSecond;
// An atomic file's temporary lives for the moment its writer writes it (a tag, a stamp, the
// counters); one younger than this may be in use by a live process, whatever the grace.
constexpr std::int64_t kAtomicTemporaryGraceNs = 60ll * kNsPerSecond;

// Leftovers of an AtomicFile ("<name>.tmp.<unique suffix>", see util/atomic_file.h) next to the files the store keeps at the
// top of the cache directory. Nothing else at the top is ours to remove: the directory may hold an
// operator's own files (a settings file, notes).
bool is_atomic_leftover(const std::string& name) {
  for (const char* kept : {store::kDigestsFile, store::kStatsFile, store::kTagFile})
    if (name.starts_with(std::string(kept) + ".tmp.")) return true;
  return false;
}

// No lease file, or one nobody can hold (a symlink or FIFO planted there: loads refuse to open it).
bool no_usable_lease(const Status& st) {
  return st.code() == StatusCode::not_found || st.code() == StatusCode::foreign;
}

class Collector {
 public:
  Collector(FileSystem& fs, const GarbageOptions& options)
      : fs_(fs), options_(options), now_(util::now_unix_ns()) {}

  // Younger things may be a publication that has not yet locked its lease.
  bool old_enough(const FileIdentity& st, std::int64_t grace_ns) const { return now_ - st.mtime_ns >= grace_ns; }
  std::int64_t grace_ns() const { return options_.grace_seconds * kNsPerSecond; }

  void take(const std::string& path, std::string reason) {
    auto bytes = tree_size(fs_, path);
    if (!bytes) return;  // gone meanwhile, or unreadable: nothing we could reliably remove
    if (options_.dry_run == DryRun::no && !remove_tree(fs_, path)) return;
    items_.push_back({path, std::move(reason), *bytes});
  }

  void stray(const std::string& path, const std::string& what) {
    auto st = fs_.stat(path, Follow::no);
    const std::string name = path.substr(path.rfind('/') + 1);
    const std::int64_t grace = is_atomic_leftover(name) ? std::max(grace_ns(), kAtomicTemporaryGraceNs) : grace_ns();
    if (st && old_enough(*st, grace)) take(path, (st->is_directory ? "stray directory" : "stray file") + what);
  }

  void unfinished(const std::string& path) {
    auto st = fs_.stat(path, Follow::no);
    if (!st) return;
    if (!st->is_directory) {
      if (options_.strays) stray(path, " in tmp/");
      return;
    }
    // Age first: even a moment's exclusive lock would make a live writer's own lock fail.
    if (options_.grace_seconds > 0 && !old_enough(*st, grace_ns())) return;
    // A writer that is alive holds the lease; a dead one's lock is gone with it. A lease still
    // empty may belong to a writer that created it and has not locked it yet: that one waits as
    // long as a publication without a lease file.
    auto lease = store::take_lease(fs_, path, LockMode::exclusive);
    auto marked = lease ? fs_.fstat(lease->get()) : Result<FileIdentity>(lease.status());
    if (lease && marked && marked->size > 0) {
      take(path, "unfinished publication, its writer is gone");
    } else if (lease && old_enough(*st, std::max(grace_ns(), kLeaselessGraceNs))) {
      take(path, "unfinished publication whose writer never took its lease");
    } else if (no_usable_lease(lease.status()) && old_enough(*st, std::max(grace_ns(), kLeaselessGraceNs))) {
      take(path, "unfinished publication without a lease file");
    }
  }

  void trash(const std::string& path) {
    // Removed entries wait here until the last process that mapped them lets go.
    auto lease = store::take_lease(fs_, path, LockMode::exclusive);
    if (lease || (no_usable_lease(lease.status()) && fs_.stat(path, Follow::no)))
      take(path, "removed entry, no longer in use");
  }

  // Files inside an entry that its manifest does not name (a torn stamp write, say).
  void entry_strays(const std::string& path, const std::string& id) {
    auto bytes = read_file(fs_, path + "/" + store::kManifestFile, format::kMaxManifestBytes, Follow::no);
    if (!bytes) return;  // a damaged entry is `verify`'s business, not gc's
    auto manifest = format::decode_manifest(*bytes);
    if (!manifest) return;
    auto names = fs_.list_directory(path);
    if (!names) return;
    for (const auto& e : *names) {
      bool known = e.name == store::kManifestFile || e.name == store::kLeaseFile || e.name == store::kStampFile ||
                   std::any_of(manifest->files.begin(), manifest->files.end(),
                               [&](const DataFile& f) { return f.name == e.name; });
      if (!known) stray(path + "/" + e.name, " in entry " + store::short_id(id));
    }
  }

  std::vector<GarbageItem> take_items() { return std::move(items_); }

 private:
  FileSystem& fs_;
  const GarbageOptions& options_;
  std::int64_t now_;
  std::vector<GarbageItem> items_;
};

// A directory that does not exist (misses/ before the first miss) has nothing to collect; one
// that cannot be listed is an error, not an empty directory.
Result<std::vector<DirEntry>> list(FileSystem& fs, const std::string& dir) {
  auto names = fs.list_directory(dir);
  if (!names && names.status().code() == StatusCode::not_found) return std::vector<DirEntry>{};
  return names;
}

}  // namespace

Result<std::vector<GarbageItem>> collect_garbage(Store& store, const GarbageOptions& options) {
  FileSystem& fs = store.fs();
  Collector c(fs, options);
  const std::string& dir = store.config().directory;
  auto tmp = list(fs, dir + "/" + store::kTmpDir);
  if (!tmp) return tmp.status();
  for (const auto& e : *tmp) c.unfinished(dir + "/" + store::kTmpDir + "/" + e.name);
  auto trash = list(fs, dir + "/" + store::kTrashDir);
  if (!trash) return trash.status();
  for (const auto& e : *trash) c.trash(dir + "/" + store::kTrashDir + "/" + e.name);
  if (options.strays) {
    auto entries = list(fs, dir + "/" + store::kEntriesDir);
    if (!entries) return entries.status();
    for (const auto& e : *entries) {
      const std::string path = store.entry_path(e.name);
      // A symlink named like an entry is a stray: entry_strays would remove names in its target.
      // One that cannot be looked at now is left alone: an I/O error must never cost an entry.
      auto st = fs.stat(path, Follow::no);
      if (!st) continue;
      if (store::is_entry_id(e.name) && st->is_directory) c.entry_strays(path, e.name);
      else c.stray(path, " in entries/");
    }
    auto misses = list(fs, dir + "/" + store::kMissesDir);
    if (!misses) return misses.status();
    for (const auto& e : *misses) {
      bool key_file = e.name.size() == 36 && e.name.ends_with(".key") && store::is_entry_id(e.name.substr(0, 32));
      if (!key_file) c.stray(dir + "/" + store::kMissesDir + "/" + e.name, " in misses/");
    }
    auto top = list(fs, dir);
    if (!top) return top.status();
    for (const auto& e : *top)
      if (is_atomic_leftover(e.name)) c.stray(dir + "/" + e.name, "");
  }
  return c.take_items();
}

}  // namespace snapcache
