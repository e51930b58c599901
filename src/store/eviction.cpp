// Eviction on request (the `snapcache evict` command): chosen entries, all, those unused for a
// while, or least recently used ones down to a size. Leased entries are never evicted.
#include <algorithm>
#include <set>

#include "util/fmt.h"

#include "snapcache/maintenance.h"
#include "store/capacity.h"
#include "store/layout.h"
#include "store/size_ledger.h"
#include "util/clock.h"

namespace snapcache {

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
      // What a removal would free: not the bytes of a file another entry shares (at least while
      // the other stays; so a dry run may say less than the eviction frees).
      const std::uint64_t freed = e.bytes - std::min(e.bytes, e.shared_bytes);
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
