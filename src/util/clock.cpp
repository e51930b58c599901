#include "util/clock.h"

#include <chrono>

namespace snapcache::util {

std::int64_t now_unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace snapcache::util
