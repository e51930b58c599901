// An entry as one stream of its storages' bytes (storages in file order, see
// format::storages_in_file_order; padding left out), read out and written in with every chunk
// checksum checked on the way: what an archive carries (src/archive/) and what a secondary store
// hands over. Both sides hash by the one chunk rule (store/chunk_hashing.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/manifest.h"
#include "store/entry_commit.h"
#include "util/hash.h"

namespace snapcache::store {

// The largest chunk a stream holds in memory to prove it before handing its bytes on. Far above
// what publish writes (kDefaultChunkSize); a larger one is refused, not allocated.
inline constexpr std::uint64_t kMaxStreamChunk = 256ull << 20;

// Bytes the stream of `manifest` carries: the sum of its storages' sizes.
std::uint64_t stream_bytes(const Manifest& manifest);

enum class ReaderLease {
  shared,  // an entry of our cache: hold its lease so nobody evicts it while it is read
  none,    // an entry of a read-only store we must not lock; every byte is proven anyway
};

// An entry opened for reading out: checked (store/entry_check.h), its data files open.
class EntryReader {
 public:
  // busy (being published or evicted) and not_found (gone) as the lookup says them; damage
  // found by the entry check as damaged/foreign.
  static Result<EntryReader> open(FileSystem& fs, const std::string& entry_path, const std::string& id,
                                  ReaderLease lease);
  const Manifest& manifest() const { return manifest_; }
  const std::string& id() const { return id_; }

  // Hands the stream to `sink` in order, piece by piece. Each chunk is read and proven against
  // its checksum before any of its bytes is handed on: a damaged chunk ends the read (damaged,
  // naming the chunk and its tensors) and nothing unproven has been handed out.
  using Sink = std::function<Status(std::uint32_t storage, const void* data, std::size_t size)>;
  Status read(const Sink& sink) const;

 private:
  EntryReader() = default;
  FileSystem* fs_ = nullptr;
  std::string id_;
  Manifest manifest_;
  std::vector<UniqueFd> data_files_;
  UniqueFd lease_;
};

// An entry being written from a stream into tmp/, every chunk checked against the manifest's
// checksum as its last byte arrives; published by the same steps as Store::publish (capacity,
// reserve, lease, fsync, rename: store/entry_commit.h). Whatever fails, nothing is left behind.
class EntryWriter {
 public:
  struct Begun {
    std::unique_ptr<EntryWriter> writer;  // null: nothing to write, `outcome` is final
    PublishOutcome outcome;
  };
  // `manifest` comes from elsewhere (an archive, another cache) and is not trusted: its layout is
  // validated, its data files must have the names this store gives them, and `id`, when not
  // empty, must be key_id(manifest.key). The published entry keeps the key, layout and checksums,
  // gets this machine's file identities, and records `origin` (what the caller proved of where it
  // came from; see EntryCommit).
  static Begun begin(Store& store, Manifest manifest, EntryOrigin origin, const std::string& id = {});
  ~EntryWriter();

  std::uint64_t stream_bytes() const { return stream_bytes_; }
  std::uint64_t received() const { return received_; }
  // The next bytes of the stream. An error (a chunk that does not match its checksum: damaged,
  // naming the storage, the chunk and its tensors; more bytes than the entry holds; a write
  // failure) ends the writer: finish() then reports it and removes the pending entry.
  Status write(const void* data, std::size_t size);
  // After the last byte: checks the stream was whole, makes the data durable and commits.
  PublishOutcome finish();
  // Ends without publishing (the stream broke off elsewhere): failed with `why`.
  PublishOutcome abandon(Status why);

 private:
  EntryWriter(Store& store, Manifest manifest, EntryOrigin origin);
  Status write_bytes(const void* data, std::uint64_t size);  // at pos_ of file_, hashing
  Status pad_to(std::uint64_t offset);                       // zeros up to `offset` of file_
  Status next_file();                                        // pads out the current file

  Store& store_;
  Manifest manifest_;
  EntryCommit commit_;
  std::optional<PendingEntry> pending_;
  std::vector<UniqueFd> files_;
  std::vector<std::uint32_t> order_;
  std::size_t next_storage_ = 0;  // index into order_
  std::uint32_t file_ = 0;
  std::uint64_t pos_ = 0;    // in file_
  std::uint64_t chunk_ = 0;  // of file_, being hashed
  std::unique_ptr<util::Hasher64> hasher_;  // of chunk_
  std::uint64_t stream_bytes_ = 0;
  std::uint64_t received_ = 0;
  Status error_;
};

}  // namespace snapcache::store
