// Rounding up to a multiple, for offsets and counts (storages aligned in a data file, staging
// buffers, chunks). One definition, so every layer rounds the same way.
#pragma once

#include <cstdint>

namespace snapcache::util {

constexpr std::uint64_t div_up(std::uint64_t v, std::uint64_t d) { return (v + d - 1) / d; }
constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return div_up(v, a) * a; }

}  // namespace snapcache::util
