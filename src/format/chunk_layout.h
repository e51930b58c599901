// The chunk rule every checksum follows: chunk `c` of a data file covers bytes
// [c * chunk_size, min((c + 1) * chunk_size, size)), and its checksum is their XXH3-64. Decoding a
// manifest (the count), publication, the rehash, the entry streams and the GPU upload's staging
// all use these, never arithmetic of their own (store/chunk_hashing.h checks a chunk).
#pragma once

#include <algorithm>
#include <cstdint>

#include "snapcache/manifest.h"

namespace snapcache::format {

struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

inline std::uint64_t chunk_count(const DataFile& file) {
  return file.chunk_size == 0 ? 0 : (file.size + file.chunk_size - 1) / file.chunk_size;
}

inline ByteRange chunk_range(const DataFile& file, std::uint64_t chunk) {
  const std::uint64_t offset = chunk * file.chunk_size;
  return {offset, std::min(file.chunk_size, file.size - offset)};
}

}  // namespace snapcache::format
