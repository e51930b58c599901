// Whether a mapped file's pages are in the page cache, asked of the kernel (mincore) for a sample
// of them: a load's report says how much it read from the disk, and how fast (issue 21: with the
// page cache dropped a load is as fast as the disk, and the user should see that it was the disk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "snapcache/extend/file_system.h"

namespace snapcache::util {

// The share of the mapping [data, data + size) that is in the page cache, from about `samples`
// pages spread evenly over it, asked in runs of up to 16 neighbours (the first pages of each of
// as many equal parts), a mincore call per run and at most 64 calls where runs of 16 allow it:
// 1,024 single pages, a call each, took about 1.3 ms of a warm load on the development machine,
// where one call for every page of a 2 GiB file took 37 ms (a 16 GiB file would take 0.3 s).
// `data` is any address in a mapping: the pages asked about are those [data, data + size) touches.
// nullopt when the kernel does not answer (mincore fails); 1 for an empty mapping.
std::optional<double> resident_share(const void* data, std::uint64_t size, std::size_t samples = 1024);

// Of `size` bytes with that share of them in the page cache, those that are not.
std::uint64_t bytes_off_page_cache(std::uint64_t size, double resident_share);

// A file's bytes, and how many of them are not in the page cache (resident_share's sample).
struct FileResidency {
  std::uint64_t size = 0;
  std::uint64_t off_page_cache = 0;
};
// Asked of a file the user named (a checkpoint file: links followed, only a regular file opened)
// through a read-only shared mapping made for the question; an error when the file cannot be
// opened or mapped, or the kernel does not answer.
Result<FileResidency> residency_of(FileSystem& fs, const std::string& path);

}  // namespace snapcache::util
