#include "util/clock.h"

#include <chrono>

namespace snapcache::util {

std::int64_t now_unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t unix_ns_from(std::int64_t seconds, std::int64_t nanoseconds) {
  std::int64_t ns = 0;
  if (__builtin_mul_overflow(seconds, std::int64_t{1'000'000'000}, &ns) ||
      __builtin_add_overflow(ns, nanoseconds, &ns))
    return seconds < 0 ? kEarliestUnixNs : kLatestUnixNs;
  return ns;
}

std::int64_t elapsed_ns(std::int64_t unix_ns, std::int64_t now) {
  if (unix_ns >= now) return 0;
  std::int64_t elapsed = 0;
  if (__builtin_sub_overflow(now, unix_ns, &elapsed)) return kLatestUnixNs;
  return elapsed;
}

bool older_than(std::int64_t unix_ns, std::int64_t now, std::int64_t age_ns) {
  if (unix_ns > now && elapsed_ns(now, unix_ns) > kClockSkewNs) return true;
  return elapsed_ns(unix_ns, now) >= age_ns;
}

}  // namespace snapcache::util
