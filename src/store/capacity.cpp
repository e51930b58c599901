// The cache's size and making room in it.
#include "store/capacity.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "util/fmt.h"

#include "snapcache/log.h"
#include "snapcache/maintenance.h"
#include "snapcache/text.h"
#include "store/layout.h"
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
};

// Unleased or not, least recently used first; a busy one is skipped when its turn comes.
Result<std::vector<Candidate>> eviction_order(Store& store) {
  auto names = store.fs().list_directory(store.config().directory + "/" + kEntriesDir);
  if (!names) return names.status().with_context("list the entries to make room");
  std::vector<Candidate> candidates;
  for (const auto& e : *names) {
    if (!is_entry_id(e.name)) continue;
    auto lease = store.fs().stat(store.entry_path(e.name) + "/" + kLeaseFile, Follow::no);
    candidates.push_back({e.name, lease ? lease->mtime_ns : 0});  // no lease file: damaged, evict first
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.last_use < b.last_use; });
  return candidates;
}

}  // namespace

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
  auto candidates = eviction_order(store);
  if (!candidates) return candidates.status();
  std::size_t next = 0;
  std::size_t leased = 0;
  for (;;) {
    auto used = total_bytes(store);
    if (!used) return used.status();
    auto space = store.fs().space(config.directory);
    if (!space) return space.status();
    bool over_capacity = *used + needed > config.capacity_bytes;
    bool over_disk = space->available_bytes < needed + config.reserve_free_bytes;
    if (!over_capacity && !over_disk) return Status::ok();
    if (next == candidates->size()) {
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
    const std::string& id = (*candidates)[next++].id;
    // Its component, while it is there to read: what a command names the entry by when it says
    // what made room.
    auto key = read_manifest_key(store.fs(), store.entry_path(id) + "/" + kManifestFile);
    auto removed = remove_entry(store, id);
    if (removed) {
      log(LogLevel::info, fmt::format("evicted entry {} ({}) to make room", short_id(id), format_size(*removed)));
      evicted.push_back({id, key ? key->component : std::string(), *removed});
    } else if (removed.status().code() == StatusCode::busy) {
      ++leased;
    } else if (removed.status().code() != StatusCode::not_found) {
      return removed.status();
    }
  }
}

}  // namespace store
}  // namespace snapcache
