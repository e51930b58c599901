// The snapshot store, as a loader uses it: open one (Store::open_for_loading) and hand it to a load,
// with the layout the load expects. Publishing and looking up entries directly (named storages and
// tensors under a Key, found again in a later process, mapped from disk) speaks the store's own
// vocabulary, which snapcache/extend/store_access.h defines; the at::Tensor front end is
// snapcache/extend/store_tensors.h, and snapcache/maintenance.h lists, verifies and cleans a cache (what
// the `snapcache` command does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

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
// The store's own vocabulary: what publish() takes and answers, what lookup() answers. A loader
// never sees them (its answer is a Status and the load's path, snapcache/pipeline.h); people who
// publish or look up entries themselves include snapcache/extend/store_access.h, which defines them.
struct StorageSource;
struct PublishOptions;
struct PublishOutcome;
struct LookupOutcome;
enum class VerifyPolicy;

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
  // Without options: PublishOptions{} (kDefaultChunkSize, a thread per hardware thread).
  PublishOutcome publish(const Key& key, std::span<const StorageSource> storages,
                         std::vector<TensorRecord> tensors, const PublishOptions& options);
  PublishOutcome publish(const Key& key, std::span<const StorageSource> storages, std::vector<TensorRecord> tensors);

  // With `expected`, an entry whose names, dtypes, shapes, strides or aliases differ is a miss
  // (with the reason), checked before anything is handed out. A damaged entry is quarantined.
  // Without a policy: VerifyPolicy::trust_identity.
  LookupOutcome lookup(const Key& key, VerifyPolicy policy, const ExpectedLayout* expected = nullptr);
  LookupOutcome lookup(const Key& key);

 private:
  Store(Config config, std::shared_ptr<FileSystem> fs);

  Config config_;
  std::shared_ptr<FileSystem> fs_;
  Status unavailable_;  // ok, or why open_for_loading could not open the cache
};

}  // namespace snapcache
