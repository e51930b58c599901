// Rehashing an entry's data files chunk by chunk, in parallel, through the FileSystem (so tests
// can count the bytes read and inject read faults).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "snapcache/maintenance.h"

namespace snapcache::store {

struct RehashResult {
  Status status;  // an I/O failure; damage is reported in `damaged`, not here
  std::vector<DamagedChunk> damaged;
  std::uint64_t bytes = 0;
};

// Hashes every chunk of the files whose index is in `files` and compares with the manifest.
// Reads through `data_files` (in the manifest's order), the descriptors the entry check opened:
// the bytes proven are the bytes a load maps, never those of whatever file the path names by the
// time the rehash runs. `progress` (when set) hears the bytes of each chunk read, from the
// hashing threads.
RehashResult rehash_files(FileSystem& fs, const Manifest& manifest, const std::vector<UniqueFd>& data_files,
                          const std::vector<std::uint32_t>& files, std::size_t threads,
                          const std::function<void(std::uint64_t)>& progress = {});

std::string describe_damage(const std::vector<DamagedChunk>& damaged);

// The rule every chunk checksum follows: chunk `chunk` of `file` covers bytes
// [chunk * chunk_size, min((chunk + 1) * chunk_size, size)) and its checksum is their XXH3-64.
struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};
ByteRange chunk_range(const DataFile& file, std::uint64_t chunk);
// ok when `digest` (of the bytes chunk_range names) is the manifest's checksum for that chunk;
// otherwise damaged, naming the file, the chunk, its bytes and the tensors in it.
Status check_chunk(const Manifest& manifest, std::uint32_t file, std::uint64_t chunk, std::uint64_t digest);

}  // namespace snapcache::store
