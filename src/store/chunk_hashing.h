// Rehashing an entry's data files chunk by chunk, in parallel, through the FileSystem (so tests
// can count the bytes read and inject read faults).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "format/chunk_layout.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/maintenance.h"
#include "snapcache/manifest.h"

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

// The chunk rule (format/chunk_layout.h), and the one check of a chunk against its checksum.
using format::ByteRange;
using format::chunk_count;
using format::chunk_range;
// ok when `digest` (of the bytes chunk_range names) is the file's checksum for that chunk;
// otherwise damaged, naming the file, the chunk and its bytes (the caller that has no manifest,
// the GPU upload's staging, cannot name the tensors in it).
Status check_chunk(const DataFile& file, std::uint64_t chunk, std::uint64_t digest);
// The same, naming the tensors of `manifest` in the chunk.
Status check_chunk(const Manifest& manifest, std::uint32_t file, std::uint64_t chunk, std::uint64_t digest);

}  // namespace snapcache::store
