// The page cache of a real file, asked of the kernel and emptied on purpose: tests of what a load
// reads from the disk, through the page cache or around it. posix_fadvise(DONTNEED) needs no
// privileges; a file system that keeps its files in memory (tmpfs) ignores it, which the callers
// see in the share they get back and skip on.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "support/catch.h"

namespace snapcache::test {

// The data files of a cache under `dir` (every entry's): what a warm load reads.
inline std::vector<std::filesystem::path> data_files_under(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string().starts_with("data-")) files.push_back(e.path());
  return files;
}

// The share of `path`'s pages in the page cache, asked of the kernel for every page (not sampled).
inline double resident_share_of(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const std::size_t size = std::filesystem::file_size(path);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(map != MAP_FAILED);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((size + page - 1) / page);
  REQUIRE(::mincore(map, size, in_core.data()) == 0);
  ::munmap(map, size);
  return static_cast<double>(std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return c & 1; })) /
         static_cast<double>(in_core.size());
}

// Drops [from, from + bytes) of `path` (bytes 0: to its end) from the page cache, written back
// first; returns the share of the file still resident (resident_share_of).
inline double drop_from_page_cache(const std::filesystem::path& path, std::uint64_t from, std::uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::fdatasync(fd) == 0);
  REQUIRE(::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(bytes), POSIX_FADV_DONTNEED) == 0);
  ::close(fd);
  return resident_share_of(path);
}

}  // namespace snapcache::test
