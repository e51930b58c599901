// Making room for a publication: the capacity and disk-reserve rules (Config), applied by evicting
// least recently used unleased entries. Private to the store: publication calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/maintenance.h"

namespace snapcache::store {

// Held while a publication makes room and reserves it: flock(LOCK_EX) on <dir>/tmp/. Publishers
// of one cache (threads or processes, of one node or several on a shared file system) measure,
// evict and reserve one after another, so no two count the same free room. A reservation is the
// publication's files in tmp/ allocated at their full size (data, manifest, lease mark): a later
// publisher measures them as cache bytes and the disk no longer has them free. The lock is let go
// before the data is written; writing runs in parallel.
// Making room takes long only when it deletes much (each eviction removes a whole entry).
inline constexpr int kReservationWaitSeconds = 60;

class ReservationLock {
 public:
  // Waits (polling, never blocking for ever) up to kReservationWaitSeconds for another publisher to
  // finish reserving; busy after that, with the reason. take_now does not wait.
  static Result<ReservationLock> take(Store& store);
  static Result<ReservationLock> take_now(Store& store);

 private:
  explicit ReservationLock(UniqueFd fd) : fd_(std::move(fd)) {}
  static Result<ReservationLock> take_within(Store& store, std::chrono::milliseconds patience);
  UniqueFd fd_;
};

// An entry's last use as eviction orders it (`snapcache evict` and making room): its lease's
// mtime, or `now` for a lease dated in the future (a wrong clock, a copy from a host whose clock
// was), which is then touched (unless `dry_run`) so that the entry ages from now on like any other
// instead of outliving them all.
std::int64_t last_use_for_eviction(FileSystem& fs, const std::string& entry_path, std::int64_t lease_mtime_ns,
                                   std::int64_t now, DryRun dry_run);

// Evicts least-recently-used unleased entries until `needed` more bytes fit under the capacity
// and the reserve, appending them to `evicted`; no_space with the reason if they cannot, and
// the failure itself when the cache cannot be measured or listed. The caller holds the
// ReservationLock until its `needed` bytes are allocated in tmp/.
Status make_room(Store& store, const ReservationLock& held, std::uint64_t needed, std::vector<EvictedEntry>& evicted);

}  // namespace snapcache::store
