#include "util/page_map.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace snapcache::util {
namespace {

// A pagemap entry's flags (Documentation/admin-guide/mm/pagemap.rst).
constexpr std::uint64_t kPresent = 1ull << 63;
constexpr std::uint64_t kSwapped = 1ull << 62;
constexpr std::uint64_t kFileOrSharedAnon = 1ull << 61;

// Entries read at a time: 512 KiB of pagemap, 2 GiB of mapping.
constexpr std::uint64_t kEntriesPerRead = 64 * 1024;

}  // namespace

std::optional<PageMap> PageMap::open() {
  // This process's own page tables, not a file of the cache or the user's: outside the FileSystem
  // seam (tools/check_layers.py lists why). O_NONBLOCK: whatever /proc holds, never a wait.
  UniqueFd fd(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return std::nullopt;
  return PageMap(std::move(fd));
}

std::optional<bool> PageMap::copied_on_write(const void* data, std::uint64_t size) const {
  if (size == 0) return false;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto from = reinterpret_cast<std::uintptr_t>(data);
  const std::uint64_t first = from / page, end = (from + size + page - 1) / page;
  std::vector<std::uint64_t> entries(std::min(kEntriesPerRead, end - first));
  for (std::uint64_t at = first; at < end;) {
    const std::uint64_t n = std::min<std::uint64_t>(entries.size(), end - at);
    const ssize_t got = ::pread(fd_.get(), entries.data(), n * sizeof(std::uint64_t),
                                static_cast<off_t>(at * sizeof(std::uint64_t)));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0 || got % sizeof(std::uint64_t) != 0) return std::nullopt;
    const std::uint64_t read = static_cast<std::uint64_t>(got) / sizeof(std::uint64_t);
    for (std::uint64_t i = 0; i < read; ++i) {
      const std::uint64_t e = entries[i];
      // In memory or swapped out, and not the file's page (a file page being migrated reads as
      // swapped and the file's): the process's own copy.
      if ((e & (kPresent | kSwapped)) != 0 && (e & kFileOrSharedAnon) == 0) return true;
    }
    at += read;
  }
  return false;
}

}  // namespace snapcache::util
