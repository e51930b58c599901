// Eviction on request (the `snapcache evict` command): chosen entries, all, those unused for a
// while, or least recently used ones down to a size. Leased entries are never evicted.
#include <algorithm>
#include <map>
#include <set>

#include "util/fmt.h"

#include "snapcache/maintenance.h"
#include "store/capacity.h"
#include "store/layout.h"
#include "store/size_ledger.h"
#include "util/clock.h"
#include "util/file_io.h"

namespace snapcache {
namespace {

// What a dry run would free by removing the entry at `path` beside the ones before it: its files
// of one name, and each file of several names whose last name it is (`names_removed` counts, per
// file, the names the run would have removed so far).
std::uint64_t dry_run_frees(FileSystem& fs, const EntryInfo& e, std::map<FileKey, std::uint64_t>& names_removed) {
  std::uint64_t freed = e.bytes - std::min(e.bytes, e.shared_bytes);
  if (e.shared_bytes == 0) return freed;
  auto names = fs.list_directory(e.path);
  if (!names) return freed;
  for (const DirEntry& name : *names) {
    auto st = fs.stat(e.path + "/" + name.name, Follow::no);
    if (!st || !st->is_regular || st->links < 2) continue;
    if (++names_removed[{st->device, st->inode}] == st->links) freed += st->size;
  }
  return freed;
}

}  // namespace

Result<EvictOutcome> evict(Store& store, const EvictRequest& request) {
  EvictOutcome out;
  // Chosen entries alone are read alone, and the cache's size is the one counted: in a cache of a
  // million entries, listing and measuring every one took minutes.
  const bool only_chosen = !request.all && !request.unused_for_seconds && !request.to_size && !request.stale;
  auto before = only_chosen ? store::size_now(store) : total_bytes(store);
  if (!before) return before.status();
  out.bytes_before = *before;
  std::uint64_t total = out.bytes_before;

  const std::set<std::string> wanted(request.ids.begin(), request.ids.end());
  std::vector<EntryInfo> entries;
  if (only_chosen) {
    for (const auto& id : wanted) {
      auto info = entry_info(store, id);
      if (info) entries.push_back(std::move(*info));
      else if (info.status().code() != StatusCode::not_found) return info.status();
    }
  } else {
    auto listed = list_entries(store);
    if (!listed) return listed.status();
    for (auto& info : *listed)
      if (info.state != EntryState::unfinished) entries.push_back(std::move(info));  // gc's business
  }
  for (const auto& id : wanted) {
    bool known = std::any_of(entries.begin(), entries.end(), [&](const EntryInfo& e) { return e.id == id; });
    if (!known) out.skipped.emplace_back(id, "no such entry");
  }
  const std::int64_t now = util::now_unix_ns();
  // A lease dated in the future counts as used now (store/capacity.h): last in this order, and
  // never "unused for" any time until it has been.
  for (EntryInfo& e : entries)
    e.last_use_unix_ns = store::last_use_for_eviction(store.fs(), e.path, e.last_use_unix_ns, now, request.dry_run);
  // Least recently used first, so --to-size keeps the entries in use.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const EntryInfo& a, const EntryInfo& b) { return a.last_use_unix_ns < b.last_use_unix_ns; });
  std::map<FileKey, std::uint64_t> names_removed;  // a dry run's, of files entries share
  for (const EntryInfo& e : entries) {
    if (request.to_size && total <= *request.to_size) break;
    bool selected = wanted.empty() ? request.all || request.unused_for_seconds || request.to_size || request.stale
                                   : wanted.count(e.id) > 0;
    if (selected && request.stale) selected = !e.stale.empty();
    if (selected && request.unused_for_seconds) {
      std::int64_t unused_ns = 0;
      if (__builtin_mul_overflow(*request.unused_for_seconds, std::int64_t{1'000'000'000}, &unused_ns))
        unused_ns = util::kLatestUnixNs;
      selected = util::elapsed_ns(e.last_use_unix_ns, now) >= unused_ns;
    }
    if (!selected) continue;
    if (request.dry_run == DryRun::yes) {
      // A dry run asks /proc/locks who holds the lease instead of trying the lock.
      if (e.leased) {
        out.skipped.emplace_back(e.id, "entry is leased by " + describe_processes(e.lease_holders));
        continue;
      }
      const std::uint64_t freed = dry_run_frees(store.fs(), e, names_removed);
      out.evicted.push_back(e.id);
      out.evicted_bytes.push_back(freed);
      out.evicted_stale.push_back(e.stale);
      out.bytes_freed += freed;
      total -= std::min(total, freed);
      continue;
    }
    auto removed = remove_entry(store, e.id);
    if (!removed) {
      const StatusCode code = removed.status().code();
      if (code == StatusCode::busy) out.skipped.emplace_back(e.id, removed.status().message());  // "entry is leased by pid 12 (python3)"
      else if (code != StatusCode::not_found) out.failed.emplace_back(e.id, removed.status());
      // not_found: removed meanwhile (another evict, gc, a load that found it damaged); nothing to do.
      continue;
    }
    out.evicted.push_back(e.id);
    out.evicted_bytes.push_back(*removed);
    out.evicted_stale.push_back(e.stale);
    out.bytes_freed += *removed;
    total -= std::min(total, *removed);
  }
  if (request.dry_run == DryRun::yes || only_chosen) {
    out.bytes_after = total;
  } else {
    auto after = total_bytes(store);
    if (!after) return after.status();
    out.bytes_after = *after;
  }
  return out;
}

}  // namespace snapcache
