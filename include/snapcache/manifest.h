// What a snapshot entry holds, as plain descriptions: its key, its data files with their chunk
// checksums, its storages and the tensors laid over them, and where it came from. src/format/manifest.h
// has the bytes (its grammar), src/format/stamp.h the verification stamp, src/format/origin.h the
// origin record, src/format/key_codec.h the key.
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

// Where an entry came from, as the cache that holds it recorded when the entry was made
// (origin.snap). Never copied from what the entry came in: an archive cannot say that a trusted
// key signed it; the importer checked the signature and wrote down whose it was. Whoever can write
// the cache directory can write this record too, as they can write the entry itself.
enum class EntryOriginKind : std::uint8_t {
  unrecorded = 0,         // no readable record: made before snapcache recorded origins
  published = 1,          // published into this cache (by a load, or Store::publish)
  imported_signed = 2,    // imported from an archive signed by `signer`, a key trusted here then
  imported_unproven = 3,  // imported from an archive whose authorship was not proven (unsigned, or
                          // `signer` was not trusted), because the importer said to trust it
                          // (--trust-unsigned, ImportOptions::trust_unsigned)
  secondary = 4,          // copied from the secondary store `source`, trusted by who may write it
};
SNAPCACHE_API const char* to_string(EntryOriginKind kind);  // "imported_signed", ...

struct EntryOrigin {
  EntryOriginKind kind = EntryOriginKind::unrecorded;
  // ({} on the strings: designated initializers may leave them out without a warning)
  std::string signer{};  // imported_*: the archive's signer, "ed25519:" and 64 hex digits; empty: unsigned
  std::string source{};  // secondary: the store's directory
  std::int64_t recorded_unix_ns = 0;  // when this cache made the entry
};
// The origin in words, as a load's report and `snapcache inspect` say it: "imported from an
// archive signed by ed25519:3b6a...", "imported from an unsigned archive with --trust-unsigned:
// its authorship is unproven".
SNAPCACHE_API std::string describe_origin(const EntryOrigin& origin);

struct Manifest {
  Key key;
  Creation creation;
  std::vector<DataFile> files;
  std::vector<StorageRecord> storages;
  std::vector<TensorRecord> tensors;

  SNAPCACHE_API std::uint64_t data_bytes() const;
};

}  // namespace snapcache
