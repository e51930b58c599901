// The snapshot store, as a loader uses it: publish named storages and tensors under a Key, find
// them again in a later process, mapped from disk. This layer knows bytes and descriptors, not
// torch; see snapcache/extend/snapshot.h for the at::Tensor front end, and snapcache/maintenance.h for
// listing, verifying and cleaning a cache (what the `snapcache` command does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <string_view>

#include "snapcache/config.h"
#include "snapcache/dtype.h"
#include "snapcache/export.h"
#include "snapcache/status.h"

namespace snapcache {

// Named here, defined where their concern is: a loader never needs their insides, so this header
// (on a loader's surface, see snapcache/pipeline.h) does not bring them. Callers that use them
// include snapcache/key.h, snapcache/manifest.h and snapcache/extend/file_system.h.
struct Key;
class DigestMemo;
struct Manifest;
struct TensorRecord;
class FileSystem;

// The chunk size publish() uses unless told otherwise; each data file records its own
// (DataFile::chunk_size, snapcache/manifest.h).
inline constexpr std::uint64_t kDefaultChunkSize = 8ull << 20;

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
SNAPCACHE_API const char* to_string(PublishResult result);

// An entry removed to make room for a new one.
struct EvictedEntry {
  std::string id;
  std::string component;  // from its key; empty when its manifest could not be read
  std::uint64_t bytes = 0;
};
// How a command says what made room, or "" when nothing did: "evicted 2 entries (3.1 GiB) to make
// room: 58cd8e9c52a3 (dit, 1.5 GiB), 9a73b6e8c87e (dit, 1.6 GiB)".
SNAPCACHE_API std::string describe_evictions(const std::vector<EvictedEntry>& evicted);

struct PublishOutcome {
  PublishResult result = PublishResult::failed;
  Status status;  // why, when not published
  std::string entry_id;
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::vector<EvictedEntry> evicted;  // entries removed to make room, least recently used first
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
SNAPCACHE_API Status check_expected_layout(const Manifest& manifest, const ExpectedLayout& expected);
// The same rules for tensors from elsewhere; `source` names where they come from in errors ("the
// donor"). With element_counts_only, shapes are compared by element count (a post-load method may
// reshape: an (N, 1) scale becomes (N,)) and strides are not compared.
enum class ShapeCheck { exact, element_counts_only };
SNAPCACHE_API Status check_expected_layout(const std::vector<TensorRecord>& tensors, const ExpectedLayout& expected,
                                           std::string_view source, ShapeCheck shapes = ShapeCheck::exact);

// An opened, verified, leased entry. Its mappings and its lease live as long as this object; the
// torch front end makes every tensor hold a shared_ptr to it. Only the store creates one.
class SNAPCACHE_API Snapshot {
 public:
  struct Impl;  // defined by the store (src/store/snapshot_impl.h)
  explicit Snapshot(std::unique_ptr<Impl> impl);
  ~Snapshot();
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  const std::string& id() const;
  const std::string& path() const;  // the entry directory
  const Manifest& manifest() const;
  // Start of storage `index` in this process's private copy-on-write mapping.
  std::byte* storage_data(std::uint32_t index) const;
  // Data file `file`'s path, for messages. To read the files the lookup checked (by their open
  // descriptors, which cannot have been swapped): stored_files() in <snapcache/extend/stored_file.h>.
  std::string data_file_path(std::uint32_t file) const;
  const Impl& impl() const { return *impl_; }  // for the store's own files

 private:
  std::unique_ptr<Impl> impl_;
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
SNAPCACHE_API const char* to_string(LookupResult result);

struct LookupOutcome {
  LookupResult result = LookupResult::miss;
  std::string reason;  // one line a person can act on
  std::string entry_id;
  std::shared_ptr<Snapshot> snapshot;  // set on hit
  bool rehashed = false;
  std::uint64_t bytes_hashed = 0;
  double seconds = 0;
};

// Always owned by a shared_ptr (open() makes one), so work that outlives a call (a background
// publication) can keep its store alive.
class SNAPCACHE_API Store : public std::enable_shared_from_this<Store> {
 public:
  // The cache the configuration names, made if absent; an error (with the reason) when it cannot
  // be used: a directory that is not a snapcache cache, one others can write, one that cannot be
  // created. For tools that must say so (the `snapcache` command). A cache that exists but
  // cannot be written (a read-only file system) opens: lookups serve its entries, publications
  // fail with the reason.
  // `fs` null (the default): posix_file_system().
  static Result<std::shared_ptr<Store>> open(Config config, std::shared_ptr<FileSystem> fs = nullptr);

  // For loaders: a store that never fails a load. `config` is usually Config::from_environment().
  // When the settings are invalid or open() refuses the cache, the store returned is unavailable
  // (see unavailable_reason): every lookup is a fallback and every publication is skipped, each
  // with that reason, and nothing touches the disk; loads take the ordinary path and their
  // reports say why.
  static std::shared_ptr<Store> open_for_loading(const Result<Config>& config,
                                                 std::shared_ptr<FileSystem> fs = nullptr);
  // Why this store cannot be used ("cache directory /x: ... Read-only file system"); empty when it
  // can. Only open_for_loading makes unavailable stores.
  const std::string& unavailable_reason() const { return unavailable_.message(); }
  // The same as a Status: ok when the store can be used.
  const Status& unavailable() const { return unavailable_; }
  // Whether loads may use this cache: ok, disabled ("the cache is disabled by configuration"), or
  // why it is unavailable. The one answer lookup, publication and the load's eligibility read.
  Status usable() const;

  const Config& config() const { return config_; }
  FileSystem& fs() const { return *fs_; }
  std::string entry_path(const std::string& id) const;
  // The checkpoint content-digest memo kept in the cache directory (<dir>/digests.json).
  DigestMemo digest_memo() const;

  // Evicts least recently used entries first when the entry would not fit under the capacity and
  // the disk reserve; `skipped` with the reason when it cannot.
  PublishOutcome publish(const Key& key, std::span<const StorageSource> storages,
                         std::vector<TensorRecord> tensors, const PublishOptions& options = {});

  // With `expected`, an entry whose names, dtypes, shapes, strides or aliases differ is a miss
  // (with the reason), checked before anything is handed out. A damaged entry is quarantined.
  LookupOutcome lookup(const Key& key, VerifyPolicy policy = VerifyPolicy::trust_identity,
                       const ExpectedLayout* expected = nullptr);

 private:
  Store(Config config, std::shared_ptr<FileSystem> fs);

  Config config_;
  std::shared_ptr<FileSystem> fs_;
  Status unavailable_;  // ok, or why open_for_loading could not open the cache
};

}  // namespace snapcache
