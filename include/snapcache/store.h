// The snapshot store: publish named storages and tensors under a Key, find them again in a later
// process, mapped from disk. This layer knows bytes and descriptors, not torch; see
// snapcache/snapshot.h for the at::Tensor front end.
#pragma once

#include <cstdint>
#include <functional>
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
  // From verified.snap, when present and sound: a full rehash proved the data after its files
  // changed identity.
  std::optional<std::int64_t> verified_unix_ns;
  // Every data file still has the identity it was proven with, so a load trusts the checksums
  // without reading the data; false means the next load rehashes.
  bool identity_trusted = false;
};

// "pid 1234 (python3), pid 99 (?)": lease holders as an operator wants to read them.
std::string describe_processes(const std::vector<int>& pids);

enum class DryRun { no, yes };

// What to evict. Without `ids`, `all` or `unused_for_seconds` nothing is selected, unless
// `to_size` is given, which selects least recently used entries until the cache holds at most
// that many bytes. Leased entries are never evicted; they are reported as skipped.
struct EvictRequest {
  std::vector<std::string> ids;                     // full entry ids
  bool all = false;
  std::optional<std::int64_t> unused_for_seconds;   // last use at least this long ago
  std::optional<std::uint64_t> to_size;             // stop once the cache is this small
  DryRun dry_run = DryRun::no;
};

struct EvictOutcome {
  std::vector<std::string> evicted;                          // least recently used first
  std::vector<std::uint64_t> evicted_bytes;                  // parallel to `evicted`
  std::vector<std::pair<std::string, std::string>> skipped;  // id, why
  std::uint64_t bytes_freed = 0;
  std::uint64_t bytes_before = 0;  // total_bytes() before
  std::uint64_t bytes_after = 0;   // and after (as it would be, on a dry run)
};

struct GarbageOptions {
  DryRun dry_run = DryRun::no;
  // Nothing younger than this is touched, so a publication that has not yet taken its lease is
  // safe. Unfinished publications without a lease file always get at least an hour.
  std::int64_t grace_seconds = 3600;
  bool strays = true;  // also files in the cache directory that belong to no entry
};

struct GarbageItem {
  std::string path;
  std::string reason;  // "unfinished publication, its writer is gone", "stray file", ...
  std::uint64_t bytes = 0;
};

// Outcomes counted by every process that used this cache directory (kept in <dir>/stats.json).
// Lookups count what Store::lookup returned; a hit that the caller then rejects (another tensor
// layout) still counts as a hit.
struct CacheCounters {
  std::int64_t since_unix_ns = 0;  // when counting began or was last zeroed; 0: never
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t damaged = 0;
  std::uint64_t fallbacks = 0;
  std::uint64_t published = 0;
  std::uint64_t already_present = 0;
  std::uint64_t publish_skipped = 0;
  std::uint64_t publish_failed = 0;
  std::uint64_t evicted = 0;
};

// A key a lookup missed, recorded (the newest 64) so `snapcache why` can explain the miss later.
struct RecordedMiss {
  std::string id;    // the key's id; no entry had it at the time
  std::string path;  // key file (see write_key_file)
  std::int64_t unix_ns = 0;
};

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

  // With `expected`, an entry whose names, dtypes, shapes, strides or aliases differ is a miss
  // (with the reason), checked before anything is handed out.
  LookupOutcome lookup(const Key& key, VerifyPolicy policy = VerifyPolicy::trust_identity,
                       const ExpectedLayout* expected = nullptr);

  // The stored key of every readable entry, for "which fields differ" messages.
  std::vector<std::pair<std::string, Key>> entry_keys();
  // The entry whose key differs from `key` in the fewest fields, with those differences.
  std::optional<std::pair<std::string, std::vector<KeyDifference>>> nearest_entry(const Key& key);

  // Maintenance (the CLI builds on these). Entries in use are never removed.
  std::vector<EntryInfo> list_entries();
  // Reads only: never changes an entry's last use.
  Result<EntryInfo> entry_info(const std::string& id);
  // Rehashes every chunk, and reports as damaged whatever a load would refuse (manifest, missing
  // data, key not matching the id, no lease file). `progress`, when given, is called with the
  // bytes of each chunk hashed, from several threads at once.
  VerifyReport verify(const std::string& id, const std::function<void(std::uint64_t)>& progress = {});
  // Removes an unleased entry; busy if leased.
  Result<std::uint64_t> remove_entry(const std::string& id);
  // Takes a damaged entry out of entries/ at once, leased or not (a process that proved it
  // earlier keeps its mapping); its bytes go when the last lease does.
  Status quarantine(const std::string& id, const std::string& why);
  EvictOutcome evict(const EvictRequest& request);
  // Evicts least-recently-used unleased entries until `needed` more bytes fit under the capacity
  // and the reserve; not_found/no_space with the reason if they cannot.
  Status make_room(std::uint64_t needed, std::vector<std::string>* evicted = nullptr);
  // Removes unfinished publications whose writer is gone, and trash.
  std::vector<std::string> collect_garbage(DryRun dry_run = DryRun::no);
  // The same, older than a grace period, and files that belong to no entry.
  std::vector<GarbageItem> collect_garbage(const GarbageOptions& options);
  std::uint64_t total_bytes();

  // Counters and recorded misses are observability, not data: they go through the POSIX file
  // system (never the injected one), are best effort, and never change an outcome.
  Result<CacheCounters> counters() const;
  Status zero_counters();
  std::vector<RecordedMiss> recorded_misses() const;  // newest first

 private:
  Store(Config config, std::shared_ptr<FileSystem> fs);
  Result<std::shared_ptr<Snapshot>> open_snapshot(const std::string& id, const Key& key,
                                                  VerifyPolicy policy, LookupOutcome& outcome);

  Config config_;
  std::shared_ptr<FileSystem> fs_;
};

}  // namespace snapcache
