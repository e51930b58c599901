// The cache's size and making room in it.
#include "store/capacity.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "util/fmt.h"

#include "snapcache/extend/file_system.h"
#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/text.h"
#include "store/entry_claim.h"
#include "store/layout.h"
#include "store/size_ledger.h"
#include "store/use_order.h"
#include "util/clock.h"
#include "util/file_io.h"

namespace snapcache {

Result<std::uint64_t> total_bytes(Store& store) {
  std::uint64_t total = 0;
  FileKeys shared;  // a file of several names (store/shared_data.h) is on the disk once
  // In the order bytes move (a publication from tmp/ to entries/, an eviction from entries/ to
  // trash/), so a directory renamed while it is measured is counted twice, never missed.
  for (const char* sub : {store::kTmpDir, store::kEntriesDir, store::kTrashDir}) {
    auto bytes = tree_size(store.fs(), store.config().directory + "/" + sub, shared);
    if (!bytes) return bytes.status().with_context("measure the cache");
    total += *bytes;
  }
  return total;
}

Result<std::uint64_t> entries_bytes(Store& store, const std::vector<std::string>& ids) {
  std::uint64_t total = 0;
  FileKeys shared;
  for (const std::string& id : ids) {
    if (!store::is_entry_id(id)) return Status(StatusCode::invalid_argument, "not an entry id (32 lowercase hex digits)");
    auto bytes = tree_size(store.fs(), store.entry_path(id), shared);
    if (!bytes && bytes.status().code() == StatusCode::not_found) continue;
    if (!bytes) return bytes.status().with_context("measure entry " + store::short_id(id));
    total += *bytes;
  }
  return total;
}

namespace store {

std::int64_t last_use_for_eviction(FileSystem& fs, const std::string& entry_path, std::int64_t lease_mtime_ns,
                                   std::int64_t now, DryRun dry_run) {
  // Best effort: it counts as now either way.
  if (lease_mtime_ns > now && dry_run == DryRun::no)
    if (auto lease = open_in_cache(fs, entry_path + "/" + kLeaseFile, OpenMode::read)) mark_used(fs, lease->get());
  return util::no_later_than(lease_mtime_ns, now);
}

Result<ReservationLock> ReservationLock::take(Store& store) {
  return take_within(store, std::chrono::seconds(kReservationWaitSeconds));
}

Result<ReservationLock> ReservationLock::take_now(Store& store) { return take_within(store, {}); }

Result<ReservationLock> ReservationLock::take_within(Store& store, std::chrono::milliseconds patience) {
  FileSystem& fs = store.fs();
  auto top = fs.open_directory(store.config().directory);
  if (!top) return top.status().with_context("lock the cache to reserve room");
  auto tmp = fs.open_directory_at(top->get(), kTmpDir);  // never through a link planted as tmp/
  if (!tmp) return tmp.status().with_context("lock the cache to reserve room");
  Status locked = lock_within(fs, tmp->get(), patience);
  if (locked) return ReservationLock(std::move(*tmp));
  if (locked.code() != StatusCode::busy) return locked.with_context("lock the cache to reserve room");
  return Status(StatusCode::busy, fmt::format("another publication has been making room in this cache for {} s",
                                              kReservationWaitSeconds));
}

namespace {

// What a publication of `needed` bytes would leave: over the capacity, or over the free disk less
// the reserve, after `freed` more bytes are gone from the cache and the disk.
struct Room {
  std::uint64_t used, available, needed, freed;
  bool over_capacity(const Config& c) const { return used - std::min(used, freed) + needed > c.capacity_bytes; }
  bool over_disk(const Config& c) const { return available + freed < needed + c.reserve_free_bytes; }
  bool fits(const Config& c) const { return !over_capacity(c) && !over_disk(c); }
};

Status no_room(Store& store, const Room& room, std::size_t leased, bool evicted_some) {
  const Config& config = store.config();
  std::string note = leased ? fmt::format("; {} leased entries could not be evicted", leased) : "";
  // Room reserved by publications still being written is not evictable either: say so.
  if (auto pending = tree_size(store.fs(), config.directory + "/" + kTmpDir); pending && *pending > 0)
    note += fmt::format("; publications in progress hold {}", format_size(*pending));
  // Evictions happen only where the plan made the entry fit (the disk can still fall short after
  // them, when another writer took what they freed).
  if (!evicted_some) note += "; nothing was evicted for it";
  if (room.over_capacity(config))
    return Status(StatusCode::no_space, fmt::format("the entry needs {} but the cache holds {} of its {} capacity{}",
                                                    format_size(room.needed), format_size(room.used),
                                                    format_size(config.capacity_bytes), note));
  return Status(StatusCode::no_space,
                fmt::format("the entry needs {} but the disk has {} free and {} must stay free{}", format_size(room.needed),
                            format_size(room.available), format_size(config.reserve_free_bytes), note));
}

}  // namespace

Status make_room(Store& store, const ReservationLock& held, std::uint64_t needed, std::vector<EvictedEntry>& evicted) {
  const Config& config = store.config();
  if (needed > config.capacity_bytes) {
    // Name what set the capacity (a flag, the settings file, the variable): that is what to change.
    const std::string origin = config.origin("capacity");
    return Status(StatusCode::no_space,
                  fmt::format("the entry needs {}, more than the cache capacity of {} ({})", format_size(needed),
                              format_size(config.capacity_bytes),
                              origin.empty() ? "the default; set SNAPCACHE_CAPACITY_GIB or capacity in the settings file"
                                             : "set by " + origin));
  }
  // Counted, not measured (store/size_ledger.h): while this publication holds the ReservationLock no
  // other one reserves, so the cache grows by nothing but small stamps meanwhile, and what each
  // eviction frees is subtracted. (Another process's evictions and gc only make the figure high,
  // which errs on the safe side.)
  auto used = counted_bytes(store, held);
  if (!used) return used.status();
  std::optional<UseOrder> order;  // read the first time an eviction is needed
  std::size_t leased = 0;
  const std::size_t evicted_before = evicted.size();
  // Plan, then evict: claim least recently used entries until what they hold makes the entry fit,
  // and remove them only then. The disk is asked again after each round, since others write to it.
  for (;;) {
    auto space = store.fs().space(config.directory);
    if (!space) return space.status();
    Room room{*used, space->available_bytes, needed, 0};
    if (room.fits(config)) return Status::ok();
    if (!order) order.emplace(store);
    std::vector<std::pair<EntryClaim, UseOrder::Next>> plan;
    while (!room.fits(config)) {
      auto next = order->next();
      if (!next) break;
      auto claim = claim_entry(store, next->id);
      if (claim) {
        room.freed += claim->bytes;
        plan.emplace_back(std::move(*claim), std::move(*next));
      } else if (claim.status().code() == StatusCode::busy) {
        ++leased;
      } else if (claim.status().code() != StatusCode::not_found) {
        return claim.status();
      }
    }
    if (!room.fits(config)) return no_room(store, room, leased, evicted.size() > evicted_before);  // the claims are let go unused
    for (auto& [claim, entry] : plan) {
      // Its component, while it is there to read: what a command names the entry by when it says
      // what made room.
      auto key = read_manifest_key(store.fs(), store.entry_path(claim.id) + "/" + kManifestFile);
      const std::string id = claim.id;
      auto removed = remove_claimed(store, std::move(claim));
      if (!removed) return removed.status();
      order->forget(entry);
      log(LogLevel::info, fmt::format("evicted entry {} ({}) to make room", short_id(id), format_size(*removed)));
      evicted.push_back({id, key ? key->component : std::string(), *removed});
      *used -= std::min(*used, *removed);
    }
  }
}

}  // namespace store
}  // namespace snapcache
