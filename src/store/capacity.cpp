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
#include "store/layout.h"
#include "util/clock.h"
#include "util/file_io.h"

namespace snapcache {

Result<std::uint64_t> total_bytes(Store& store) {
  std::uint64_t total = 0;
  // In the order bytes move (a publication from tmp/ to entries/, an eviction from entries/ to
  // trash/), so a directory renamed while it is measured is counted twice, never missed.
  for (const char* sub : {store::kTmpDir, store::kEntriesDir, store::kTrashDir}) {
    auto bytes = tree_size(store.fs(), store.config().directory + "/" + sub);
    if (!bytes) return bytes.status().with_context("measure the cache");
    total += *bytes;
  }
  return total;
}

namespace store {
namespace {

struct Candidate {
  std::string id;
  std::int64_t last_use;
  // std::push_heap and pop_heap keep the greatest first: the least recently used is "greatest".
  bool operator<(const Candidate& other) const { return last_use > other.last_use; }
};

// Every entry, least recently used on top of a heap: taking k of n costs O(n + k log n). Leased
// ones are in it too (their lease is tried when their turn comes).
Result<std::vector<Candidate>> eviction_order(Store& store) {
  FileSystem& fs = store.fs();
  auto names = fs.list_directory(store.config().directory + "/" + kEntriesDir);
  if (!names) return names.status().with_context("list the entries to make room");
  const std::int64_t now = util::now_unix_ns();
  std::vector<Candidate> candidates;
  for (const auto& e : *names) {
    if (!is_entry_id(e.name)) continue;
    const std::string path = store.entry_path(e.name);
    auto lease = fs.stat(path + "/" + kLeaseFile, Follow::no);
    // No lease file: damaged, evict first.
    candidates.push_back({e.name, lease ? last_use_for_eviction(fs, path, lease->mtime_ns, now, DryRun::no) : 0});
  }
  std::make_heap(candidates.begin(), candidates.end());
  return candidates;
}

}  // namespace

std::int64_t last_use_for_eviction(FileSystem& fs, const std::string& entry_path, std::int64_t lease_mtime_ns,
                                   std::int64_t now, DryRun dry_run) {
  // Best effort: it counts as now either way.
  if (lease_mtime_ns > now && dry_run == DryRun::no)
    if (auto lease = open_in_cache(fs, entry_path + "/" + kLeaseFile, OpenMode::read)) mark_used(fs, lease->get());
  return util::no_later_than(lease_mtime_ns, now);
}

Result<ReservationLock> ReservationLock::take(Store& store) {
  FileSystem& fs = store.fs();
  auto top = fs.open_directory(store.config().directory);
  if (!top) return top.status().with_context("lock the cache to reserve room");
  auto tmp = fs.open_directory_at(top->get(), kTmpDir);  // never through a link planted as tmp/
  if (!tmp) return tmp.status().with_context("lock the cache to reserve room");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(kReservationWaitSeconds);
  for (;;) {
    Status locked = fs.lock(tmp->get(), LockMode::exclusive, LockWait::no_wait);
    if (locked) return ReservationLock(std::move(*tmp));
    if (locked.code() != StatusCode::busy) return locked.with_context("lock the cache to reserve room");
    if (std::chrono::steady_clock::now() >= until)
      return Status(StatusCode::busy, fmt::format("another publication has been making room in this cache for {} s",
                                                  kReservationWaitSeconds));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status make_room(Store& store, const ReservationLock&, std::uint64_t needed, std::vector<EvictedEntry>& evicted) {
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
  // Measured once: while this publication holds the ReservationLock no other one reserves, so the
  // cache grows by nothing but small stamps meanwhile, and what each eviction frees is subtracted.
  // (Another process's evictions and gc only make the figure high, which errs on the safe side.)
  // Free disk is asked again each time: one call.
  auto used = total_bytes(store);
  if (!used) return used.status();
  std::optional<std::vector<Candidate>> candidates;  // listed the first time an eviction is needed
  std::size_t leased = 0;
  for (;;) {
    auto space = store.fs().space(config.directory);
    if (!space) return space.status();
    bool over_capacity = *used + needed > config.capacity_bytes;
    bool over_disk = space->available_bytes < needed + config.reserve_free_bytes;
    if (!over_capacity && !over_disk) return Status::ok();
    if (!candidates) {
      auto order = eviction_order(store);
      if (!order) return order.status();
      candidates = std::move(*order);
    }
    if (candidates->empty()) {
      std::string leased_note = leased ? fmt::format("; {} leased entries could not be evicted", leased) : "";
      // Room reserved by publications still being written is not evictable either: say so.
      if (auto pending = tree_size(store.fs(), config.directory + "/" + kTmpDir); pending && *pending > 0)
        leased_note += fmt::format("; publications in progress hold {}", format_size(*pending));
      if (over_capacity)
        return Status(StatusCode::no_space,
                      fmt::format("the entry needs {} but the cache holds {} of its {} capacity{}",
                                  format_size(needed), format_size(*used),
                                  format_size(config.capacity_bytes), leased_note));
      return Status(StatusCode::no_space,
                    fmt::format("the entry needs {} but the disk has {} free and {} must stay free{}",
                                format_size(needed), format_size(space->available_bytes),
                                format_size(config.reserve_free_bytes), leased_note));
    }
    std::pop_heap(candidates->begin(), candidates->end());
    const std::string id = std::move(candidates->back().id);
    candidates->pop_back();
    // Its component, while it is there to read: what a command names the entry by when it says
    // what made room.
    auto key = read_manifest_key(store.fs(), store.entry_path(id) + "/" + kManifestFile);
    auto removed = remove_entry(store, id);
    if (removed) {
      log(LogLevel::info, fmt::format("evicted entry {} ({}) to make room", short_id(id), format_size(*removed)));
      evicted.push_back({id, key ? key->component : std::string(), *removed});
      *used -= std::min(*used, *removed);
    } else if (removed.status().code() == StatusCode::busy) {
      ++leased;
    } else if (removed.status().code() != StatusCode::not_found) {
      return removed.status();
    }
  }
}

}  // namespace store
}  // namespace snapcache
