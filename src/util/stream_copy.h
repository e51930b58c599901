// A copy that writes its destination with non-temporal stores: the destination's cache lines are
// written without being read first (an ordinary copy, the kernel's included, reads each line it
// is about to overwrite), and the written bytes do not push the source out of the cache. For
// staging buffers the CPU never reads again (the bus reads them).
#pragma once

#include <cstddef>

namespace snapcache::util {

// Copies `bytes` from `from` to `to` (not overlapping); on return the stores are visible to other
// threads and to the device (a store fence).
void stream_copy(std::byte* to, const std::byte* from, std::size_t bytes);

}  // namespace snapcache::util
