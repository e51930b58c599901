// The cache directory's layout and the small shared pieces of the store's implementation.
//
//   <dir>/CACHEDIR.TAG         marks the tree as a cache for backup tools, and as snapcache's:
//                              Store::open uses no other non-empty directory
//   <dir>/entries/<id>/        published entries (see src/format/manifest.h)
//   <dir>/tmp/<id>.<nonce>/    publications in progress; their writer holds flock(LOCK_EX) on
//                              the lease file inside, so a dead writer's leftovers are detectable.
//                              tmp/ itself is flocked (LOCK_EX) by a publication while it makes
//                              and reserves room (store/capacity.h: ReservationLock)
//   <dir>/trash/<id>.<nonce>/  entries being removed (rename first, then delete)
//   <dir>/digests.json         checkpoint content-digest memo
//   <dir>/stats.json           hit/miss/publication counters (best effort, see stats.h);
//                              <dir> itself is flocked (LOCK_EX) while they are replaced
//   <dir>/misses/<id>.key      keys of recent misses, for `snapcache why`
//   <dir>/index/<c>/<k>.<id>   entries by component and checkpoint, for a miss to name the
//                              nearest (store/entry_index.h)
//   <dir>/size                 the cache's size as counted (store/size_ledger.h); entries/ is
//                              flocked (LOCK_EX) while it is read and replaced
//   <dir>/lru/<t>/<s>/<id>     entries by last use, for making room (store/use_order.h)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"

namespace snapcache::store {

inline constexpr const char* kEntriesDir = "entries";
inline constexpr const char* kTmpDir = "tmp";
inline constexpr const char* kTrashDir = "trash";
inline constexpr const char* kManifestFile = "manifest.snap";
inline constexpr const char* kLeaseFile = "lease";
inline constexpr const char* kStampFile = "verified.snap";
// Where the entry came from (format/origin.h), written by the cache that made it.
inline constexpr const char* kOriginFile = "origin.snap";
// What a publication writes into its lease once it holds the lock (see PendingEntry and gc).
inline constexpr std::string_view kLeaseTakenMark = "L";
inline constexpr const char* kDigestsFile = "digests.json";
inline constexpr const char* kStatsFile = "stats.json";
inline constexpr const char* kMissesDir = "misses";
inline constexpr const char* kTagFile = "CACHEDIR.TAG";

std::string data_file_name(std::uint32_t index);
bool is_entry_id(const std::string& name);  // 32 lowercase hex digits
std::string short_id(const std::string& id);

// Opens `<entry>/lease` and takes flock in `mode` without waiting; then checks that the file is
// still the one at that path (an evictor may have renamed the entry meanwhile).
Result<UniqueFd> take_lease(FileSystem& fs, const std::string& entry_path, LockMode mode);

// `path` as a directory of the cache's own, made if absent (`create`); never a link or anything
// else. Each level of a tree is checked before the next is made in it, so nothing is created
// through a planted link.
bool own_directory(FileSystem& fs, const std::string& path, bool create);

// flock(LOCK_EX) on `fd`, tried without blocking until `patience` has passed: flock has no
// timeout, and a blocking wait on a stuck holder would never return.
Status lock_within(FileSystem& fs, int fd, std::chrono::microseconds patience);

// Dates an entry's last use (what LRU eviction goes by) now, through the lease's descriptor (a
// path could name another file by now). A lease with a second name is a hard link shared with a
// file outside the entry: touching it would change that file too, so it is left alone and the
// entry only looks older to eviction. Best effort, likewise: a failed touch only makes it look older.
void mark_used(FileSystem& fs, int lease_fd);

// Reads just the key at the front of a manifest (format::decode_manifest_head, then the key's
// bytes): enough to explain a miss, find an index record or name an evicted entry, without reading
// (or trusting) the rest. The full manifest is checksummed when the entry is actually loaded.
Result<Key> read_manifest_key(FileSystem& fs, const std::string& manifest_path);

// Processes holding flock locks on the file with this identity, from /proc/locks.
std::vector<int> flock_holders(const FileIdentity& id);

}  // namespace snapcache::store
