// The steps every new entry takes, whoever supplies its bytes (publish from memory, an import from
// an archive or a secondary store): room made under the capacity and the reserve, a directory in
// tmp/ with its lease held, the data made durable and its identity recorded, the manifest written
// last, and the rename that commits it. One copy of these rules, so every writer has the same
// crash safety (docs/reliability.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"

namespace snapcache::store {

// An entry being written in tmp/<id>.<suffix>/, its lease held exclusively so collectors leave it
// alone. Whatever was not committed is removed when it goes away, so every failure path of a
// writer leaves nothing behind (a killed writer leaves what gc collects).
class PendingEntry {
 public:
  static Result<PendingEntry> create(FileSystem& fs, std::string tmp_path);
  PendingEntry(PendingEntry&& other) noexcept;
  PendingEntry& operator=(PendingEntry&&) = delete;
  ~PendingEntry();

  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Creates the entry's files at their full sizes (data files read-only from the start: an
  // accidental write to a published entry, which every loader maps, is refused, and no chmod
  // after the data changes the identity recorded for it), and writes its origin record, whose
  // bytes are known now. The room they take is what the next publisher measures (see
  // ReservationLock in store/capacity.h).
  Status reserve(const Manifest& manifest, std::uint64_t manifest_bytes, const std::string& origin_bytes);
  // The size ledger counts `bytes` for this reservation (store/size_ledger.h): removing it
  // unpublished subtracts them again.
  void counted(std::string cache_directory, std::uint64_t bytes) {
    cache_directory_ = std::move(cache_directory);
    counted_bytes_ = bytes;
  }
  // `bytes` of the reservation are another entry's now (store/shared_data.h): the ledger no
  // longer counts them here.
  void shared(std::uint64_t bytes);
  const std::string& path() const { return path_; }
  // The reserved data file `index`, to write (the writer owns it from then on).
  UniqueFd take_data_file(std::size_t index) { return std::move(data_files_.at(index)); }
  // Writes the manifest into the file reserved for it, which it must fill exactly.
  Status write_manifest(const Manifest& manifest);

  enum class Commit { done, already_present };
  // Makes the lease and the directory durable, then renames the directory to `final_path`: the
  // commit. already_present when another process published the key first (ours then goes).
  Result<Commit> commit(const std::string& final_path);

 private:
  PendingEntry(FileSystem& fs, std::string path) : fs_(&fs), path_(std::move(path)) {}
  FileSystem* fs_;
  std::string path_;
  UniqueFd lease_;
  std::vector<UniqueFd> data_files_;
  UniqueFd manifest_;
  UniqueFd origin_;
  std::uint64_t manifest_bytes_ = 0;
  bool created_ = false;  // the directory exists and is ours to remove
  std::string cache_directory_;
  std::uint64_t counted_bytes_ = 0;
};

// One new entry's way into the cache, with its outcome (counted in stats.json and logged once,
// as every publication's is). `origin` is what the entry records of where it came from
// (origin.snap): the caller's own knowledge (it published, it checked an archive's signature, it
// copied from the secondary store), never what the bytes' source says of itself.
class EntryCommit {
 public:
  EntryCommit(Store& store, const Key& key, EntryOrigin origin);

  // Whether the store takes entries at all; when not, the outcome (skipped, with the reason) is final.
  bool takes_entries();
  // Checks that the key has no entry yet, collects dead writers' leftovers, then under the
  // ReservationLock makes room for the whole entry (its data files and `manifest`'s exact bytes;
  // evicting least recently used unleased entries) and reserves it: the pending entry with its
  // files at full size. Empty when there is nothing to write: the outcome (already_present,
  // skipped with the reason, failed) is then final. Fields filled in after this (chunk hashes,
  // data file identities) keep the manifest's length (they have fixed widths).
  std::optional<PendingEntry> begin(const Manifest& manifest);
  // After the data files are durable and their identities are in `manifest`: shares the files
  // another entry holds byte for byte (store/shared_data.h), writes the manifest and renames the
  // entry into entries/.
  void commit(PendingEntry& entry, Manifest& manifest);
  // Ends with `result` (an error on the way, say); returns the outcome.
  PublishOutcome& finish(PublishResult result, Status status);
  PublishOutcome& outcome() { return out_; }

 private:
  Store& store_;
  std::string component_;  // for the log line
  EntryOrigin origin_;
  std::chrono::steady_clock::time_point started_;
  PublishOutcome out_;
};

// fsyncs a data file just written, checks it has `file.size` bytes and records its identity in
// `file`, then waits until the coarse file clock has moved on (see settle_timestamps in the .cpp).
Status seal_data_file(FileSystem& fs, int fd, DataFile& file);

// File timestamps come from a coarse clock (one scheduler tick, up to 10 ms). A change made in the
// same tick as an identity just recorded would keep that identity, and a later load would trust
// stale checksums. Waiting until the clock has moved on makes every later write visible as a new
// mtime/ctime. Costs at most ~20 ms.
void settle_timestamps(const FileIdentity& id);

}  // namespace snapcache::store
