#include "util/page_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace snapcache::util {

std::optional<double> resident_share(const void* data, std::uint64_t size, std::size_t samples) {
  if (size == 0 || samples == 0) return 1.0;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  // From the page `data` lies in: mincore asks about whole pages, from a page's start.
  const auto from = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = from / page * page;
  data = reinterpret_cast<const void*>(first);
  size += from - first;
  const std::uint64_t pages = (size + page - 1) / page;
  const std::uint64_t asked = std::min<std::uint64_t>(samples, pages);
  std::uint64_t resident = 0;
  for (std::uint64_t i = 0; i < asked; ++i) {
    const std::uint64_t at = i * pages / asked * page;  // the first page of part i
    unsigned char in_core = 0;
    if (::mincore(const_cast<char*>(static_cast<const char*>(data) + at), 1, &in_core) != 0) return std::nullopt;
    resident += in_core & 1u;
  }
  return static_cast<double>(resident) / static_cast<double>(asked);
}

}  // namespace snapcache::util
