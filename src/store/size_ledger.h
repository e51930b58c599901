// The cache's size, counted as it changes instead of measured for each publication (measuring a
// cache of a million entries walks every file: 20 s, while the publication holds the
// ReservationLock and every other publisher waits):
//
//   <dir>/size    "snapcache size <bytes>\n": the bytes in tmp/, entries/ and trash/
//
// Bytes enter the cache only by a reservation in tmp/ (made under the ReservationLock) and leave it
// only when a tree in tmp/ or trash/ is deleted; renames between them change nothing. So a
// reservation adds what it allocated, and each deletion subtracts what it deleted. The file is
// read and replaced (by rename, never written in place) under flock(LOCK_EX) on <dir>/entries/,
// which nothing else locks.
//
// A missing, torn or foreign file (a link, a second name, junk) is no figure: the cache is measured
// and the figure recorded again. An addition is never lost: it waits for the lock and is durable,
// or, when the figure cannot be read or replaced, the figure is removed (the next one measures);
// a subtraction that cannot get the lock within 2 s, or fails, is dropped, which leaves the figure
// too high: eviction then makes room a little early, and the cache never outgrows its capacity.
// Small files written after publication (an entry's verified stamp) are not counted until gc
// measures the cache and records the figure again, which also corrects any drift.
#pragma once

#include <cstdint>
#include <string>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"

namespace snapcache::store {

inline constexpr const char* kSizeFile = "size";

class ReservationLock;

// The recorded figure; the cache measured (total_bytes) and recorded when there is none. The
// caller holds the ReservationLock, so no reservation is made while it measures.
Result<std::uint64_t> counted_bytes(Store& store, const ReservationLock& held);

// The recorded figure, read without the lock (the file is only ever replaced whole), for a
// command to report; the cache measured when there is none.
Result<std::uint64_t> size_now(Store& store);

// A reservation of `bytes` in tmp/, under the ReservationLock. No figure recorded: nothing to add
// to (the next measure sees the reservation).
Status count_reserved(FileSystem& fs, const std::string& cache_directory, const ReservationLock& held,
                      std::uint64_t bytes);

// `bytes` deleted from tmp/ or trash/. Best effort (see above).
void count_deleted(FileSystem& fs, const std::string& cache_directory, std::uint64_t bytes);

// Measures the cache and records the figure (gc). Under the ReservationLock.
Result<std::uint64_t> recount(Store& store, const ReservationLock& held);

}  // namespace snapcache::store
