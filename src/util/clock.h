// Wall-clock time as the cache records it (creation, last use, verification): nanoseconds since
// the Unix epoch, comparable with file mtimes.
#pragma once

#include <cstdint>

namespace snapcache::util {

std::int64_t now_unix_ns();

}  // namespace snapcache::util
