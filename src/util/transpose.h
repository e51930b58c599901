// A cache-blocked, multi-threaded 2-D transpose of raw elements: the memory-bound kernel behind
// the post-load layout conversions (row-major <-> column-major), at memory speed instead of the
// element-by-element strided copy a generic `contiguous()` does.
#pragma once

#include <cstddef>

namespace snapcache::util {

// dst = transpose(src): src is `rows` x `cols` row-major, dst becomes `cols` x `rows` row-major.
// Elements are `element_size` bytes (1, 2, 4, 8 or 16) and copied bit for bit. The rows are split
// among up to `threads` threads; src and dst must not overlap, and need no alignment.
void transpose(const void* src, void* dst, std::size_t rows, std::size_t cols, std::size_t element_size,
               std::size_t threads);

}  // namespace snapcache::util
