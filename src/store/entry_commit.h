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

#include "snapcache/store.h"

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

  enum class Commit { done, already_present };
  // Makes the lease and the directory durable, then renames the directory to `final_path`: the
  // commit. already_present when another process published the key first (ours then goes).
  Result<Commit> commit(const std::string& final_path);

 private:
  PendingEntry(FileSystem& fs, std::string path) : fs_(&fs), path_(std::move(path)) {}
  FileSystem* fs_;
  std::string path_;
  UniqueFd lease_;
  bool created_ = false;  // the directory exists and is ours to remove
};

// One new entry's way into the cache, with its outcome (counted in stats.json and logged once,
// as every publication's is).
class EntryCommit {
 public:
  EntryCommit(Store& store, const Key& key);

  // Checks that the store takes entries and that the key has none yet, collects dead writers'
  // leftovers, makes room for `data_bytes` plus the manifest (evicting least recently used
  // unleased entries) and creates the pending entry. Empty when there is nothing to write: the
  // outcome (already_present, skipped with the reason, failed) is then final.
  std::optional<PendingEntry> begin(std::uint64_t data_bytes, std::size_t tensors, std::size_t chunks);
  // After the data files are durable and their identities are in `manifest`: writes the manifest
  // and renames the entry into entries/.
  void commit(PendingEntry& entry, const Manifest& manifest);
  // Ends with `result` (an error on the way, say); returns the outcome.
  PublishOutcome& finish(PublishResult result, Status status);
  PublishOutcome& outcome() { return out_; }

 private:
  Store& store_;
  std::string component_;  // for the log line
  std::chrono::steady_clock::time_point started_;
  PublishOutcome out_;
};

// fsyncs a data file just written, checks it has `file.size` bytes and records its identity in
// `file`, then waits until the coarse file clock has moved on (see settle_timestamps in the .cpp).
Status seal_data_file(FileSystem& fs, int fd, DataFile& file);

}  // namespace snapcache::store
