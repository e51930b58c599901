// Bytes a tier served that also lie in a file: where an uploader may read them instead of the
// served memory (reading whole checksum chunks into pinned buffers is faster than touching a
// mapping page by page, and the bytes are checked on the way). A tier that serves from files
// hands them out (HostStorage::file); an uploader reads and checks them. Opaque: an uploader sees
// no descriptor, no path and no format record, and every read goes through the FileSystem seam of
// whoever made the handle (so a wrapping file system sees, and may fail, the staged read of a
// load).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/extend/file_system.h"
#include "snapcache/status.h"

namespace snapcache {

class Snapshot;

class SNAPCACHE_API StoredFile {
 public:
  virtual ~StoredFile();
  // How messages name it (the file and its entry).
  virtual std::string name() const = 0;
  virtual std::uint64_t size() const = 0;
  // The file's checksum chunks are [c * chunk_bytes, min(size, (c + 1) * chunk_bytes)); 0 when it
  // has none (check() then has nothing to compare).
  virtual std::uint64_t chunk_bytes() const = 0;
  // Reads [offset, offset + bytes) whole; damaged when the file ends early.
  virtual Status read(std::byte* out, std::uint64_t offset, std::uint64_t bytes) const = 0;
  // Compares the chunks of [begin, end), whose bytes are at `bytes`, with their checksums. `begin`
  // is a chunk's first byte and `end` a chunk's end or the file's. Fails with damaged, naming the
  // file, the chunk and the tensors in it.
  virtual Status check(std::uint64_t begin, std::uint64_t end, const std::byte* bytes) const = 0;
  // Reads [begin, end), whole checksum chunks as check() takes them, into `out` and compares each
  // chunk with its checksum: read() then check(), which is what this does unless a file does
  // better. The store's files read each chunk in pieces and hash each piece as it arrives, while
  // it is still in the CPU's cache, instead of reading a whole unit back from memory.
  virtual Status read_checked(std::byte* out, std::uint64_t begin, std::uint64_t end) const;
  // read_checked around the page cache (FileSystem::reopen_uncached): for bytes the page cache does
  // not hold, the disk's bytes straight into `out`, read in the same pieces and hashed as they
  // arrive, without filling the page cache. `out` is aligned to kUncachedAlignment and has room for
  // end - begin rounded up to it (the last read of a file reaches past its end). Unsupported where
  // the file, its file system or the alignment does not allow it, as this default says: the caller
  // then reads the same bytes with read_checked.
  virtual Status read_checked_uncached(std::byte* out, std::uint64_t begin, std::uint64_t end) const;
  // The whole file mapped read-only and shared (its page cache, no private copy), for an uploader
  // that registers those pages with its device.
  virtual Result<MappedRegion> map() const = 0;
  // The share of bytes [begin, end) of the file in the page cache now (sampled; 0 to 1), which a
  // read will not take from the disk; nullopt when the file cannot tell, as this default says.
  virtual std::optional<double> resident_share(std::uint64_t begin, std::uint64_t end) const;
  std::optional<double> resident_share() const { return resident_share(0, size()); }
};

// A storage's first byte in a stored file.
struct StoredBytes {
  std::shared_ptr<const StoredFile> file;  // keeps what the file belongs to alive (a snapshot)
  std::uint64_t offset = 0;
};

// An opened snapshot's data files, in its manifest's order, each read through the store's file
// system by the descriptor its lookup checked and mapped, and checked against the manifest.
SNAPCACHE_API std::vector<std::shared_ptr<const StoredFile>> stored_files(const std::shared_ptr<Snapshot>& snapshot);

}  // namespace snapcache
