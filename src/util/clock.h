// Wall-clock time as the cache records it (creation, last use, verification): nanoseconds since
// the Unix epoch, comparable with file mtimes.
//
// A file's time is whatever its last writer set (utimensat sets any date), so a time read from
// the cache may lie in the future (a clock that was wrong, a file copied from a host whose clock
// was) or beyond what 64-bit nanoseconds hold (after 2262-04-11). The rules for such times are
// here, once: a conversion saturates instead of wrapping; for ordering, a time in the future
// counts as now; and a time in the future proves nothing about age, so it protects nothing from
// garbage collection.
#pragma once

#include <cstdint>
#include <limits>

namespace snapcache::util {

std::int64_t now_unix_ns();

// What a time after 2262-04-11 23:47:16 UTC (or before 1677-09-21) saturates to.
inline constexpr std::int64_t kLatestUnixNs = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t kEarliestUnixNs = std::numeric_limits<std::int64_t>::min();

// seconds * 10^9 + nanoseconds, saturated at kLatestUnixNs / kEarliestUnixNs (a timespec).
std::int64_t unix_ns_from(std::int64_t seconds, std::int64_t nanoseconds);

// For ordering by time (least recently used first): a moment in the future counts as `now`.
inline std::int64_t no_later_than(std::int64_t unix_ns, std::int64_t now) { return unix_ns < now ? unix_ns : now; }

// How long before `now` the moment `unix_ns` was: 0 for a moment in the future, saturated for one
// so long ago that the difference does not fit.
std::int64_t elapsed_ns(std::int64_t unix_ns, std::int64_t now);

// Whether something dated `unix_ns` has been left alone for at least `age_ns` (gc's grace). A
// date more than kClockSkewNs in the future is not believed and counts as old: a wrong clock must
// not keep junk for ever. Within kClockSkewNs it counts as now (hosts that share a file system
// disagree by that much at most).
bool older_than(std::int64_t unix_ns, std::int64_t now, std::int64_t age_ns);
inline constexpr std::int64_t kClockSkewNs = 60ll * 1'000'000'000;

}  // namespace snapcache::util
