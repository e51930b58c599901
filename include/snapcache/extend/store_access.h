// The store as its own users see it: people who write tiers, import entries or work with entries
// directly (the `snapcache` command, the torch front end in snapcache/extend/store_tensors.h). Publish
// named storages and tensors under a Key and get the store's own answer (published, already
// present, skipped, failed; what was evicted); look one up and get an opened, verified, leased
// Snapshot; check an entry or tensors from elsewhere against an expected layout. A loader needs
// none of this: it sees Status and the load's path (snapcache/pipeline.h), and Store is declared
// against these types in snapcache/store.h without defining them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/status.h"
#include "snapcache/store.h"

namespace snapcache {

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
  // For sources their owner may write while they are published (a CPU load's tensors, handed out at
  // once): the chunk checksums fingerprint_sources() took before the owner had them. Each chunk is
  // then read once, hashed and written from what was read, and the entry is committed only when
  // every chunk is the fingerprinted bytes; else the publication fails (mismatch), keeps nothing,
  // and the store remembers it (sources_changed_while_published). Empty: the sources do not change
  // until publish() returns.
  std::vector<std::uint64_t> expected_chunk_hashes = {};
};

// The chunk checksums an entry of `sources` would have (with `options`' chunk size, on its
// threads): for PublishOptions::expected_chunk_hashes.
SNAPCACHE_API Result<std::vector<std::uint64_t>> fingerprint_sources(std::span<const StorageSource> sources,
                                                                     const PublishOptions& options = {});

// Whether a publication of `key` with expected_chunk_hashes found its sources changed (their owner
// wrote into them meanwhile): a later publication of the key publishes a copy instead. Kept with
// the key's recorded miss (`snapcache why`), best effort.
SNAPCACHE_API bool sources_changed_while_published(const Store& store, const Key& key);

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

// Checks names (missing and extra), dtypes, shapes, strides and storage sharing of an entry
// against what a loader declared (ExpectedLayout, snapcache/store.h).
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

// Declared in snapcache/store.h (Store::lookup takes one).
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

}  // namespace snapcache
