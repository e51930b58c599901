// Which pages of a private file mapping this process has written, asked of the kernel
// (/proc/self/pagemap). A page of a MAP_PRIVATE file mapping is the page cache's own until the
// process writes to it; the write gives the process an anonymous copy. So a range whose pages are
// all still the file's (or not yet faulted in) holds exactly the file's bytes, and an uploader may
// read them from the file instead (a load from the checkpoint: loaders/checkpoint_file.h).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "snapcache/extend/file_system.h"

namespace snapcache::util {

class PageMap {
 public:
  // nullopt where the kernel does not offer /proc/self/pagemap (no /proc, a kernel without it).
  static std::optional<PageMap> open();

  // Whether any page [data, data + size) touches, in what must be a private file mapping, was
  // copied on write: in memory or swapped out, and not the file's page. nullopt when
  // the kernel does not answer. A page is 8 bytes of the pagemap: 16 GiB asks for 32 MiB of it,
  // about 15 ms on the development machine.
  std::optional<bool> copied_on_write(const void* data, std::uint64_t size) const;

 private:
  explicit PageMap(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace snapcache::util
