// Garbage collection: unfinished publications whose writer is gone, removed entries waiting in
// trash/, files in the cache directory that belong to no entry, and entries no load can reach.
#include <algorithm>
#include <array>
#include <functional>
#include <optional>

#include "format/manifest.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"
#include "store/capacity.h"
#include "store/entry_index.h"
#include "store/size_ledger.h"
#include "store/use_order.h"
#include "store/layout.h"
#include "store/miss_record.h"
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

std::string kind_of(const FileIdentity& st) {
  if (st.is_directory) return "a directory";
  if (st.is_symlink) return "a symbolic link";
  if (st.is_regular) return "a file";
  return "a special file (FIFO, socket or device)";
}

// No lease file, or one nobody can hold (a symlink or FIFO planted there: loads refuse to open it).
bool no_usable_lease(const Status& st) {
  return st.code() == StatusCode::not_found || st.code() == StatusCode::foreign;
}

class Collector {
 public:
  Collector(FileSystem& fs, const std::string& cache_directory, const GarbageOptions& options)
      : fs_(fs), cache_directory_(cache_directory), options_(options), now_(util::now_unix_ns()) {}

  // Younger things may be a publication that has not yet locked its lease. A date in the future
  // (a wrong clock) protects nothing (util/clock.h).
  bool old_enough(const FileIdentity& st, std::int64_t grace_ns) const {
    return util::older_than(st.mtime_ns, now_, grace_ns);
  }
  std::int64_t grace_ns() const { return options_.grace_seconds * kNsPerSecond; }

  // Removes `path` (on a dry run: says it would). What cannot be removed is reported with the
  // reason, never dropped: it stays, and it counts toward the cache's size.
  void take(const std::string& path, std::string reason) {
    auto bytes = tree_size(fs_, path);
    if (!bytes && bytes.status().code() == StatusCode::not_found) return;  // gone meanwhile
    if (!bytes) {
      items_.push_back({path, std::move(reason), 0, bytes.status()});
      return;
    }
    GarbageItem item{path, std::move(reason), *bytes, Status::ok()};
    if (options_.dry_run == DryRun::no) {
      // What the deletion frees: a file another name keeps (store/shared_data.h) frees nothing.
      auto alone = tree_size(fs_, path, SharedFiles::not_at_all);
      std::uint64_t alone_left = 0;
      item.error = remove_tree(fs_, path);
      if (!item.error) {
        auto left = tree_size(fs_, path);
        item.bytes = left ? *left : 0;
        auto still = tree_size(fs_, path, SharedFiles::not_at_all);
        alone_left = still ? *still : 0;
      }
      const std::uint64_t deleted = alone ? *alone - std::min(*alone, alone_left) : 0;
      if (counted(path)) store::count_deleted(fs_, cache_directory_, deleted);
    }
    items_.push_back(std::move(item));
  }

  // In the size ledger's count (store/size_ledger.h): tmp/, entries/ and trash/.
  bool counted(const std::string& path) const {
    for (const char* sub : {store::kTmpDir, store::kEntriesDir, store::kTrashDir})
      if (path.starts_with(cache_directory_ + "/" + sub + "/")) return true;
    return false;
  }

  // Entries no load can reach, through evict(): its rule says which entries are stale, that one
  // in use stays and how an entry is removed. The grace period is its "unused for".
  Status stale_entries(Store& store) {
    EvictRequest request;
    request.stale = true;
    request.unused_for_seconds = options_.grace_seconds;
    request.dry_run = options_.dry_run;
    auto out = evict(store, request);
    if (!out) return out.status();
    auto reason = [](const std::string& why) { return "stale entry: " + why; };
    for (std::size_t i = 0; i < out->evicted.size(); ++i)
      items_.push_back({store.entry_path(out->evicted[i]), reason(out->evicted_stale[i]), out->evicted_bytes[i],
                        Status::ok()});
    for (const auto& [id, why] : out->skipped) {
      const std::string path = store.entry_path(id);
      auto info = entry_info(store, id);
      if (!info) continue;  // gone meanwhile
      items_.push_back({path, reason(info->stale), info->bytes, Status(StatusCode::busy, why)});
    }
    for (const auto& [id, error] : out->failed) {
      auto info = entry_info(store, id);  // its bytes may be in trash/ by now, named in the error
      items_.push_back({store.entry_path(id), "stale entry", info ? info->bytes : 0, error});
    }
    return Status::ok();
  }

  // Something where the store keeps a directory of its own making (misses/, an entry removed to
  // trash/, index/), which is not a directory: no process of the store makes such a thing, so
  // none is in progress, and the name is the store's, so the thing is not the user's.
  void junk(const std::string& path, const FileIdentity& st, const std::string& where) {
    take(path, kind_of(st) + " " + where);
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
    auto st = fs_.stat(path, Follow::no);
    if (!st) return;
    if (!st->is_directory) return junk(path, *st, "in trash/, where removed entries are directories");
    // Removed entries wait here until the last process that mapped them lets go.
    auto lease = store::take_lease(fs_, path, LockMode::exclusive);
    if (lease || (no_usable_lease(lease.status()) && fs_.stat(path, Follow::no)))
      take(path, "removed entry, no longer in use");
  }

  // Files inside an entry that its manifest does not name (a torn stamp write, say); and the
  // entry's index record, made if it has none (an entry from before the index, a failed write).
  void entry_strays(const std::string& cache, const std::string& path, const std::string& id) {
    auto bytes = read_file(fs_, path + "/" + store::kManifestFile, format::kMaxManifestBytes, Follow::no);
    if (!bytes) return;  // a damaged entry is `verify`'s business, not gc's
    auto manifest = format::decode_manifest(*bytes);
    if (!manifest) return;
    if (options_.dry_run == DryRun::no) store::index_entry(fs_, cache, manifest->key, id);
    auto names = fs_.list_directory(path);
    if (!names) return;
    for (const auto& e : *names) {
      bool known = e.name == store::kManifestFile || e.name == store::kLeaseFile || e.name == store::kStampFile ||
                   e.name == store::kOriginFile ||
                   std::any_of(manifest->files.begin(), manifest->files.end(),
                               [&](const DataFile& f) { return f.name == e.name; });
      if (!known) stray(path + "/" + e.name, " in entry " + store::short_id(id));
    }
  }

  // index/ (store/entry_index.h): what is not a record of an entry that is still there goes, and
  // so do directories left empty (after the grace period: a publication may be about to add
  // to one). It decides nothing, so a part that cannot be read is left for the next gc.
  void index(const std::string& cache) {
    records_under(cache, store::kIndexDir, [](const std::string&, const DirEntry& e) {
      return e.is_directory && store::is_index_hash_name(e.name);
    });
  }

  // lru/ (store/use_order.h), like index/: what is not a record of an entry still there goes,
  // and so do directories left empty, after the grace period. The records of entries removed
  // (which eviction leaves, not knowing the second they are filed under) and the directories they
  // leave go unreported: the store's own bookkeeping, which a user who evicted should not be told
  // of as left over. What the store did not make there is reported.
  void use_order(const std::string& cache) {
    records_under(cache, store::kUseOrderDir, [](const std::string& thousand, const DirEntry& e) {
      return e.is_directory && (thousand.empty() ? store::is_use_order_directory(e.name, "")
                                                 : store::is_use_order_directory(thousand, e.name));
    });
  }

  std::vector<GarbageItem> take_items() { return std::move(items_); }

 private:
  // index/ and lru/ are two levels of directories (`is_level` says which names belong: given the
  // first level's name at the second) over records; anything else there is a stray.
  void records_under(const std::string& cache, const char* dir,
                     const std::function<bool(const std::string& first, const DirEntry&)>& is_level) {
    const std::string root = cache + "/" + dir, where = std::string(dir) + "/";
    auto st = fs_.stat(root, Follow::no);
    if (!st) return;
    if (!st->is_directory) return junk(root, *st, "where " + where + " should be a directory");
    auto firsts = fs_.list_directory(root);
    if (!firsts) return;
    for (const auto& f : *firsts) {
      const std::string first = root + "/" + f.name;
      if (!is_level("", f)) {
        stray(first, " in " + where);
        continue;
      }
      auto seconds = fs_.list_directory(first);
      if (!seconds) continue;
      if (seconds->empty()) empty_directory(first, where);
      for (const auto& s : *seconds) {
        const std::string second = first + "/" + s.name;
        if (!is_level(f.name, s)) {
          stray(second, " in " + where);
          continue;
        }
        auto records = fs_.list_directory(second);
        if (!records) continue;
        if (records->empty()) empty_directory(second, where);
        for (const auto& r : *records) record(cache, second + "/" + r.name, r.name, where);
      }
    }
  }

  // After the grace period; one of index/ is reported, one lru/ leaves behind goes unreported.
  void empty_directory(const std::string& path, const std::string& where) {
    auto st = fs_.stat(path, Follow::no);
    if (!st || !old_enough(*st, grace_ns())) return;
    if (where == "index/") take(path, "empty index directory");
    else if (options_.dry_run == DryRun::no) (void)fs_.remove_directory(path);
  }

  // A record of index/ or lru/ (`where`): an empty file named after an entry that is still there.
  void record(const std::string& cache, const std::string& path, const std::string& name, const std::string& where) {
    auto found = fs_.stat(path, Follow::no);
    if (!found) return;
    if (!store::is_entry_id(name) || !found->is_regular) {
      stray(path, " in " + where);
      return;
    }
    auto entry = fs_.stat(cache + "/" + store::kEntriesDir + "/" + name, Follow::no);
    if (entry || entry.status().code() != StatusCode::not_found) return;
    if (where == "index/") take(path, "index record of an entry that is gone");
    else if (options_.dry_run == DryRun::no) (void)fs_.remove_file(path);
  }


  FileSystem& fs_;
  const std::string& cache_directory_;
  const GarbageOptions& options_;
  std::int64_t now_;
  std::vector<GarbageItem> items_;
};

// What a directory of the cache holds. One that does not exist (misses/ before the first miss)
// has nothing to collect; one that is not a directory (a file or a link where misses/ should be)
// is junk itself, never listed or followed; one that cannot be listed is an error, not an empty
// directory.
struct Listing {
  std::vector<DirEntry> names;
  std::optional<FileIdentity> not_a_directory;
};

Result<Listing> list(FileSystem& fs, const std::string& dir) {
  auto st = fs.stat(dir, Follow::no);
  if (!st && st.status().code() == StatusCode::not_found) return Listing{};
  if (!st) return st.status();
  if (!st->is_directory) return Listing{{}, *st};
  auto names = fs.list_directory(dir);
  if (!names && names.status().code() == StatusCode::not_found) return Listing{};
  if (!names) return names.status();
  return Listing{std::move(*names), std::nullopt};
}

}  // namespace

Result<std::vector<GarbageItem>> collect_garbage(Store& store, const GarbageOptions& options) {
  FileSystem& fs = store.fs();
  const std::string& dir = store.config().directory;
  Collector c(fs, dir, options);
  // Every directory is listed before anything is removed: one that cannot be listed fails gc
  // before it removed anything, so whatever it removes is in what it returns.
  auto tmp = list(fs, dir + "/" + store::kTmpDir);
  if (!tmp) return tmp.status();
  auto trash = list(fs, dir + "/" + store::kTrashDir);
  if (!trash) return trash.status();
  Result<Listing> entries = Listing{}, misses = Listing{}, top = Listing{};
  if (options.strays) {
    entries = list(fs, dir + "/" + store::kEntriesDir);
    if (!entries) return entries.status();
    misses = list(fs, dir + "/" + store::kMissesDir);
    if (!misses) return misses.status();
    top = list(fs, dir);
    if (!top) return top.status();
  }

  // Stale entries first: their eviction lists the entries again, and fails before it removes any.
  if (options.stale) SNAPCACHE_RETURN_IF_ERROR(c.stale_entries(store));
  for (const auto& e : tmp->names) c.unfinished(dir + "/" + store::kTmpDir + "/" + e.name);
  for (const auto& e : trash->names) c.trash(dir + "/" + store::kTrashDir + "/" + e.name);
  if (!options.strays) return c.take_items();
  c.index(dir);  // before the entries, which add the records they lack
  c.use_order(dir);
  // The size figure is a file the store replaces by rename; anything else there it cannot replace.
  const std::string figure = dir + "/" + store::kSizeFile;
  if (auto st = fs.stat(figure, Follow::no); st && !st->is_regular) c.junk(figure, *st, "where size should be a file");
  for (const auto& e : entries->names) {
    const std::string path = store.entry_path(e.name);
    // A symlink named like an entry is a stray: entry_strays would remove names in its target.
    // One that cannot be looked at now is left alone: an I/O error must never cost an entry.
    auto st = fs.stat(path, Follow::no);
    if (!st) continue;
    if (store::is_entry_id(e.name) && st->is_directory) c.entry_strays(dir, path, e.name);
    else c.stray(path, " in entries/");
  }
  const std::string misses_dir = dir + "/" + store::kMissesDir;
  if (misses->not_a_directory) c.junk(misses_dir, *misses->not_a_directory, "where misses/ should be a directory");
  for (const auto& e : misses->names) {
    const std::string path = misses_dir + "/" + e.name;
    bool record = store::is_miss_record_name(e.name);
    if (record) {
      auto st = fs.stat(path, Follow::no);
      record = !st || st->is_regular;  // one that went meanwhile is nothing to collect
    }
    if (!record) c.stray(path, " in misses/");
  }
  for (const auto& e : top->names)
    if (is_atomic_leftover(e.name)) c.stray(dir + "/" + e.name, "");
  // The size counted again, which corrects what the count missed (store/size_ledger.h). Not while
  // a publication makes room: it would wait for it, and the next gc counts.
  if (options.dry_run == DryRun::no)
    if (auto lock = store::ReservationLock::take_now(store)) (void)store::recount(store, *lock);
  return c.take_items();
}

}  // namespace snapcache
