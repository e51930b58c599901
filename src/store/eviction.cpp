// Eviction on request (the `snapcache evict` command): chosen entries, all, those unused for a
// while, or least recently used ones down to a size. Leased entries are never evicted.
#include <algorithm>
#include <set>

#include "util/fmt.h"

#include "snapcache/store.h"
#include "store/layout.h"

namespace snapcache {

EvictOutcome Store::evict(const EvictRequest& request) {
  EvictOutcome out;
  out.bytes_before = total_bytes();
  std::uint64_t total = out.bytes_before;

  std::vector<EntryInfo> entries;
  for (auto& info : list_entries())
    if (info.state != EntryState::unfinished) entries.push_back(std::move(info));  // gc's business
  // Least recently used first, so --to-size keeps the entries in use.
  std::reverse(entries.begin(), entries.end());

  const std::set<std::string> wanted(request.ids.begin(), request.ids.end());
  for (const auto& id : wanted) {
    bool known = std::any_of(entries.begin(), entries.end(), [&](const EntryInfo& e) { return e.id == id; });
    if (!known) out.skipped.emplace_back(id, "no such entry");
  }
  const std::int64_t now = store::now_unix_ns();
  for (const EntryInfo& e : entries) {
    if (request.to_size && total <= *request.to_size) break;
    bool selected = wanted.empty() ? request.all || request.unused_for_seconds || request.to_size
                                   : wanted.count(e.id) > 0;
    if (selected && request.unused_for_seconds)
      selected = now - e.last_use_unix_ns >= *request.unused_for_seconds * 1'000'000'000;
    if (!selected) continue;
    if (request.dry_run == DryRun::yes) {
      // A dry run asks /proc/locks who holds the lease instead of trying the lock.
      if (e.leased) {
        out.skipped.emplace_back(e.id, "entry is leased by " + describe_processes(e.lease_holders));
        continue;
      }
      out.evicted.push_back(e.id);
      out.evicted_bytes.push_back(e.bytes);
      out.bytes_freed += e.bytes;
      total -= std::min(total, e.bytes);
      continue;
    }
    auto removed = remove_entry(e.id);
    if (!removed) {
      out.skipped.emplace_back(e.id, removed.status().message());  // "entry is leased by pid 12 (python3)"
      continue;
    }
    out.evicted.push_back(e.id);
    out.evicted_bytes.push_back(*removed);
    out.bytes_freed += *removed;
    total -= std::min(total, *removed);
  }
  out.bytes_after = request.dry_run == DryRun::yes ? total : total_bytes();
  return out;
}

}  // namespace snapcache
