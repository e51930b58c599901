// What a snapshot entry holds, as plain descriptions: its key, its data files with their chunk
// checksums, its storages and the tensors laid over them. src/format/manifest.h has the bytes
// (its grammar), src/format/stamp.h the verification stamp, src/format/key_codec.h the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapcache/dtype.h"
#include "snapcache/export.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"

namespace snapcache {

// The version of the entry format (manifest, stamp, key encoding): bumped whenever the bytes
// snapcache writes change meaning. Part of every key, so entries of another version are misses.
inline constexpr std::uint32_t kFormatVersion = 1;

inline constexpr std::uint64_t kStorageAlignment = 4096;

struct Creation {
  std::int64_t created_unix_ns = 0;
  std::string snapcache_version;
  std::string host;
  std::uint32_t pid = 0;
};

struct DataFile {
  std::string name;  // relative to the entry directory: "data-0000.bin"
  std::uint64_t size = 0;
  std::uint64_t chunk_size = kDefaultChunkSize;
  std::vector<std::uint64_t> chunk_hashes;
  FileIdentity identity;  // is_directory is not stored
};

struct StorageRecord {
  std::uint32_t file = 0;
  std::uint64_t offset = 0;
  std::uint64_t nbytes = 0;
};

struct TensorRecord {
  std::string name;
  DType dtype = DType::float32;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  std::uint32_t storage = 0;
  std::int64_t storage_offset = 0;  // elements
};

struct Manifest {
  Key key;
  Creation creation;
  std::vector<DataFile> files;
  std::vector<StorageRecord> storages;
  std::vector<TensorRecord> tensors;

  SNAPCACHE_API std::uint64_t data_bytes() const;
};

}  // namespace snapcache
