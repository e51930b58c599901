// The snapshot store: publish named storages and tensors under a Key, find them again in a later
// process, mapped from disk. This layer knows bytes and descriptors, not torch; see
// snapcache/snapshot.h for the at::Tensor front end.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "snapcache/config.h"
#include "snapcache/file_system.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "snapcache/status.h"

namespace snapcache {

// Bytes of one storage, owned by the caller for the duration of publish().
struct StorageSource {
  const void* data = nullptr;
  std::uint64_t nbytes = 0;
};

struct PublishOptions {
  std::uint64_t chunk_size = kDefaultChunkSize;
  std::size_t threads = 0;  // 0: one per hardware thread, at most 16
};

enum class PublishResult {
  published,        // this call wrote the entry
  already_present,  // an entry for the key exists (perhaps another process just wrote it)
  skipped,          // not written, for a reason that is not a failure (disabled, too large)
  failed,           // a storage failure; nothing half-written remains
};
const char* to_string(PublishResult result);

struct PublishOutcome {
  PublishResult result = PublishResult::failed;
  Status status;  // why, when not published
  std::string entry_id;
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::vector<std::string> evicted;  // entries removed to make room
};

// What a loader expects to get back; built from the model's declarations or a cold load.
struct ExpectedTensor {
  std::string name;
  DType dtype = DType::float32;
  std::vector<std::int64_t> sizes;
  std::optional<std::vector<std::int64_t>> strides;  // unchecked when absent
  // Tensors with the same non-empty group must share one storage; different groups must not.
  std::string alias_group;
};
using ExpectedLayout = std::vector<ExpectedTensor>;

// Checks names (missing and extra), dtypes, shapes, strides and storage sharing.
Status check_expected_layout(const Manifest& manifest, const ExpectedLayout& expected);

// An opened, verified, leased entry. Its mappings and its lease live as long as this object; the
// torch front end makes every tensor hold a shared_ptr to it.
class Snapshot {
 public:
  ~Snapshot();
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  const std::string& id() const { return id_; }
  const std::string& path() const { return path_; }
  const Manifest& manifest() const { return manifest_; }
  // Start of storage `index` in this process's private copy-on-write mapping.
  std::byte* storage_data(std::uint32_t index) const;

 private:
  friend class Store;
  Snapshot() = default;
  std::string id_;
  std::string path_;
  Manifest manifest_;
  std::vector<MappedRegion> mappings_;  // one per data file
  UniqueFd lease_;
};

enum class VerifyPolicy {
  trust_identity,  // rehash only if a data file's identity changed since it was last proven
  always_rehash,
};

enum class LookupResult {
  hit,
  miss,      // no entry for this key
  damaged,   // there was one, it failed a check and has been removed
  fallback,  // a storage failure; use the ordinary loader
  disabled,  // the cache is switched off
};
const char* to_string(LookupResult result);

struct LookupOutcome {
  LookupResult result = LookupResult::miss;
  std::string reason;  // one line a person can act on
  std::string entry_id;
  std::shared_ptr<Snapshot> snapshot;  // set on hit
  bool rehashed = false;
  std::uint64_t bytes_hashed = 0;
  double seconds = 0;
};

// One chunk that failed its checksum, with the tensors that have bytes in it.
struct DamagedChunk {
  std::string file;
  std::uint64_t chunk = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::vector<std::string> tensors;
};

struct VerifyReport {
  std::string entry_id;
  Status status;  // ok, or why the entry is damaged
  std::vector<DamagedChunk> damaged_chunks;
  std::uint64_t bytes_hashed = 0;
};

enum class EntryState { ok, damaged, unfinished };
const char* to_string(EntryState state);

struct EntryInfo {
  std::string id;
  std::string path;
  EntryState state = EntryState::ok;
  std::string problem;              // why damaged
  std::optional<Manifest> manifest;  // when it could be read
  std::uint64_t bytes = 0;          // on disk
  std::int64_t last_use_unix_ns = 0;
  bool leased = false;
  std::vector<int> lease_holders;  // process ids holding the lease (from /proc/locks)
};

struct EvictOutcome {
  std::vector<std::string> evicted;
  std::vector<std::pair<std::string, std::string>> skipped;  // id, why
  std::uint64_t bytes_freed = 0;
};

enum class DryRun { no, yes };

class Store {
 public:
  static Result<std::shared_ptr<Store>> open(Config config,
                                             std::shared_ptr<FileSystem> fs = posix_file_system());

  const Config& config() const { return config_; }
  FileSystem& fs() const { return *fs_; }
  std::string entry_path(const std::string& id) const;
  // The checkpoint content-digest memo kept in the cache directory (<dir>/digests.json).
  DigestMemo digest_memo() const;

  PublishOutcome publish(const Key& key, std::span<const StorageSource> storages,
                         std::vector<TensorRecord> tensors, const PublishOptions& options = {});

  LookupOutcome lookup(const Key& key, VerifyPolicy policy = VerifyPolicy::trust_identity);

  // The stored key of every readable entry, for "which fields differ" messages.
  std::vector<std::pair<std::string, Key>> entry_keys();
  // The entry whose key differs from `key` in the fewest fields, with those differences.
  std::optional<std::pair<std::string, std::vector<KeyDifference>>> nearest_entry(const Key& key);

  // Maintenance (the CLI builds on these). Entries in use are never removed.
  std::vector<EntryInfo> list_entries();
  Result<EntryInfo> entry_info(const std::string& id);
  VerifyReport verify(const std::string& id);
  // Removes an unleased entry; busy if leased.
  Result<std::uint64_t> remove_entry(const std::string& id);
  // Evicts least-recently-used unleased entries until `needed` more bytes fit under the capacity
  // and the reserve; not_found/no_space with the reason if they cannot.
  Status make_room(std::uint64_t needed, std::vector<std::string>* evicted = nullptr);
  // Removes unfinished publications whose writer is gone, and trash.
  std::vector<std::string> collect_garbage(DryRun dry_run = DryRun::no);
  std::uint64_t total_bytes();

 private:
  Store(Config config, std::shared_ptr<FileSystem> fs);
  Result<std::shared_ptr<Snapshot>> open_snapshot(const std::string& id, const Key& key,
                                                  VerifyPolicy policy, LookupOutcome& outcome);
  Status quarantine(const std::string& id, const std::string& why);

  Config config_;
  std::shared_ptr<FileSystem> fs_;
};

}  // namespace snapcache
