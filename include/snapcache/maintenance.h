// The maintenance surface of a cache: list entries, prove them sound, remove, evict, collect
// garbage, read the shared counters and the recorded misses. The `snapcache` command is built on
// these and nothing else; a loader needs only snapcache/store.h. Entries in use (leased) are
// never removed, except that damage is quarantined at once (see quarantine).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "snapcache/status.h"
#include "snapcache/store.h"

namespace snapcache {

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
  // In a file another entry shares, proven for that entry earlier in the run (VerifiedFiles), so
  // not hashed again.
  std::uint64_t bytes_proven_before = 0;
};

// What verify_entry proved over a run of several entries: a data file entries share (equal bytes
// are stored once: docs/format.md) is hashed for the first entry that names it, and is proven for
// the others while it keeps the identity it was hashed under and they list the chunk hashes it matched.
class SNAPCACHE_API VerifiedFiles {
 public:
  bool contains(const FileIdentity& now, const DataFile& file) const;
  void add(const FileIdentity& now, const DataFile& file);

 private:
  // By (device, inode): a run over many entries that share many files finds each in log time.
  std::multimap<std::pair<std::uint64_t, std::uint64_t>, std::pair<FileIdentity, DataFile>> proven_;
};

enum class EntryState { ok, damaged, unfinished };
SNAPCACHE_API const char* to_string(EntryState state);

struct EntryInfo {
  std::string id;
  std::string path;
  EntryState state = EntryState::ok;
  std::string problem;              // why damaged
  std::optional<Manifest> manifest;  // when it could be read
  std::uint64_t bytes = 0;          // on disk
  // Of `bytes`, those in data files another entry holds too (entries with the same bytes share
  // one file): on the disk once, and not freed by removing this entry while the other stays.
  std::uint64_t shared_bytes = 0;
  std::int64_t last_use_unix_ns = 0;
  bool leased = false;
  std::vector<int> lease_holders;  // process ids holding the lease (from /proc/locks)
  // From verified.snap, when present and sound: a full rehash proved the data after its files
  // changed identity.
  std::optional<std::int64_t> verified_unix_ns;
  // Every data file still has the identity it was proven with, so a load trusts the checksums
  // without reading the data; false means the next load rehashes.
  bool identity_trusted = false;
  // Why no load can reach the entry any more, or "": a checkpoint file its key names by path has
  // changed or vanished since the entry was made (describe_checkpoint now gives another identity),
  // so every load of that path computes another key. Entries keyed by content are never stale.
  std::string stale;
  // Where the entry came from, as this cache recorded it when it made the entry (origin.snap):
  // published here, imported from an archive signed by a trusted key, imported with its
  // authorship unproven, copied from the secondary store; unrecorded for entries made before
  // snapcache recorded it, and when the record cannot be read (`origin_problem` says why).
  EntryOrigin origin;
  std::string origin_problem;
};

// "pid 1234 (python3), pid 99 (?)": lease holders as an operator wants to read them.
SNAPCACHE_API std::string describe_processes(const std::vector<int>& pids);

enum class DryRun { no, yes };

// What to evict. Without `ids`, `all` or `unused_for_seconds` nothing is selected, unless
// `to_size` is given, which selects least recently used entries until the cache holds at most
// that many bytes. Leased entries are never evicted; they are reported as skipped.
struct EvictRequest {
  std::vector<std::string> ids;                     // full entry ids
  bool all = false;
  std::optional<std::int64_t> unused_for_seconds;   // last use at least this long ago
  std::optional<std::uint64_t> to_size;             // stop once the cache is this small
  bool stale = false;                               // entries no load can reach (EntryInfo::stale)
  DryRun dry_run = DryRun::no;
};

struct EvictOutcome {
  std::vector<std::string> evicted;                          // least recently used first
  std::vector<std::uint64_t> evicted_bytes;                  // parallel to `evicted`
  std::vector<std::string> evicted_stale;                    // parallel to `evicted`: EntryInfo::stale
  std::vector<std::pair<std::string, std::string>> skipped;  // id, why: in use (leased) or no such entry
  // id, the error that stopped its removal (a read-only file system, a file where the entry's
  // directory should be, ...): the cache could not be written, which is not "in use".
  std::vector<std::pair<std::string, Status>> failed;
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
  // Also entries no load can reach (EntryInfo::stale) unused for the grace period, chosen and
  // removed by evict() as `snapcache evict --stale --older-than GRACE` does, leased ones left.
  // `snapcache gc` sets it; off here because it lists and checks every entry, which a
  // publication's own cleanup of tmp/ and trash/ must not pay.
  bool stale = false;
};

struct GarbageItem {
  std::string path;
  std::string reason;  // "unfinished publication, its writer is gone", "stray file", ...
  std::uint64_t bytes = 0;  // what it held; when not removed, what it still holds
  // ok: removed (on a dry run: would be). Otherwise why it is still there, in whole or in part:
  // busy for a stale entry in use (it goes once its lease is let go), another code for a removal
  // the system refused (an immutable file, a read-only file system), with the path refused.
  Status error;
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
  // The lookups and publications of each hour with any, oldest first: the last 7 days (168
  // buckets at most; older ones are dropped as new ones come), so a dashboard can plot the hit
  // rate over time. Zeroing the counters clears it.
  struct Hour {
    std::int64_t start_unix_ns = 0;  // the hour's first moment (UTC hours: whole multiples of 3600 s)
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::uint64_t damaged = 0;
    std::uint64_t fallbacks = 0;
    std::uint64_t published = 0;
    std::uint64_t lookups() const { return hits + misses + damaged + fallbacks; }
    // Summing hours into days (the start stays this one's).
    Hour& operator+=(const Hour& other) {
      hits += other.hits;
      misses += other.misses;
      damaged += other.damaged;
      fallbacks += other.fallbacks;
      published += other.published;
      return *this;
    }
  };
  std::vector<Hour> history;
  static constexpr std::int64_t kHistoryHours = 7 * 24;
};

// A key a lookup missed, recorded (the newest 64) so `snapcache why` can explain the miss later.
// A load that missed and then failed (its loader raised) is recorded as a failure, not a miss.
struct RecordedMiss {
  std::string id;    // the key's id; no entry had it at the time
  std::string path;  // key file (see write_key_file)
  std::int64_t unix_ns = 0;
  // The lookup's words for the miss at the time ("no entry for this key; nearest entry 3f2a...
  // differs in ..."): what caused it, still there after the entry has been published. Empty for
  // misses recorded before reasons were, or when it could not be read.
  std::string reason;
  // The load's error when the load that missed then failed (record_failed_load): the loader
  // raised, its output was not the plan's. Empty for a miss (the load went on, or is still going).
  std::string failure;
};

// Whether a failed check means the entry itself is bad (damaged, foreign, mismatch, unfinished):
// a load quarantines such an entry and `snapcache verify` reports it as damage. Other codes (I/O
// errors, permissions) say nothing about the entry.
SNAPCACHE_API bool is_entry_damage(StatusCode code);

// Every entry, then unfinished publications (in tmp/), most recently used first. Fails when the
// cache's directories cannot be listed; an entry that cannot be read is listed as damaged.
SNAPCACHE_API Result<std::vector<EntryInfo>> list_entries(Store& store);
// The same, each handed to `visit` as soon as it is read: the order is taken from the leases
// alone, first, and each entry read in its turn (reading a million entries whole takes minutes;
// `snapcache ls` prints as it goes). Unfinished publications come last.
SNAPCACHE_API Status visit_entries(Store& store, const std::function<void(EntryInfo)>& visit);
// The ids of the published entries, their names alone (no entry read): what resolving an id takes,
// in a cache whose full listing takes minutes.
SNAPCACHE_API Result<std::vector<std::string>> entry_ids(Store& store);
// Reads only: never changes an entry's last use. not_found when there is no such entry.
SNAPCACHE_API Result<EntryInfo> entry_info(Store& store, const std::string& id);
// Rehashes every chunk, and reports as damaged whatever a load would refuse (the same entry check
// as Store::lookup: manifest, key not matching the id, no lease file, data files missing or of
// another size). `progress`, when given, is called with the bytes of each chunk hashed, from
// several threads at once. It holds a shared lease meanwhile, as a load does: an entry that is
// being evicted or published is busy, one that went (or was replaced) while it was checked is
// not_found; neither is damage, and neither may be repaired.
SNAPCACHE_API VerifyReport verify_entry(Store& store, const std::string& id,
                                        const std::function<void(std::uint64_t)>& progress = {});
// The same, one entry of a run: files in `verified` are not hashed again (they count toward
// `progress` all the same), and the shared files this entry proves are added to it.
SNAPCACHE_API VerifyReport verify_entry(Store& store, const std::string& id,
                                        const std::function<void(std::uint64_t)>& progress, VerifiedFiles& verified);
// Removes an unleased entry and returns the bytes it held; busy if leased.
SNAPCACHE_API Result<std::uint64_t> remove_entry(Store& store, const std::string& id);
// Takes a damaged entry out of entries/ at once, leased or not (a process that proved it earlier
// keeps its mapping); its bytes go when the last lease does.
SNAPCACHE_API Status quarantine(Store& store, const std::string& id, const std::string& why);
SNAPCACHE_API Result<EvictOutcome> evict(Store& store, const EvictRequest& request);
// Removes unfinished publications whose writer is gone, and trash; with `options`, also those
// older than a grace period, files that belong to no entry and stale entries. Every item found is
// returned, with its error when it could not be removed (the rest is removed all the same). Fails,
// having removed nothing, when one of the cache's directories exists but cannot be listed.
SNAPCACHE_API Result<std::vector<GarbageItem>> collect_garbage(Store& store, const GarbageOptions& options);
// Bytes under entries/, tmp/ and trash/.
SNAPCACHE_API Result<std::uint64_t> total_bytes(Store& store);
// Bytes the entries `ids` take together: a file several of them share counts once. An entry removed
// meanwhile counts nothing.
SNAPCACHE_API Result<std::uint64_t> entries_bytes(Store& store, const std::vector<std::string>& ids);

// Counters and recorded misses are observability, not data: they go through the store's file
// system like every file of the cache, are best effort, and never change an outcome.
SNAPCACHE_API Result<CacheCounters> read_counters(const Store& store);
SNAPCACHE_API Status zero_counters(Store& store);
SNAPCACHE_API std::vector<RecordedMiss> recorded_misses(const Store& store);  // newest first
// Records that the load of `key` failed after its lookup missed, with the load's error: the
// snapshot tier calls it (Tier::load_failed), so `snapcache why` shows "failed: <reason>" instead
// of a miss. A later miss of the key is a miss again until its load fails too.
SNAPCACHE_API void record_failed_load(const Store& store, const Key& key, const std::string& reason);

// The stored key of every readable entry (one manifest read per entry).
SNAPCACHE_API Result<std::vector<std::pair<std::string, Key>>> entry_keys(Store& store);
// The entry a miss is best explained by, and how its key differs (diff_keys).
struct NearestEntry {
  std::string id;
  std::vector<KeyDifference> differences;
};
// The entry nearest to `key`: one of its component and checkpoint (same_checkpoint: the same
// files, changed or not; another rank, dtype or torch), the one that differs in the fewest fields.
// Only such an entry explains a miss: how another model's key, or this model's on other files,
// differs says nothing of why this one missed. With none, the miss is that model's first load
// (first_load_reason). It compares at most 16 entries, whatever the size of the cache, chosen by
// the cache's index (those of the key's component and checkpoint).
SNAPCACHE_API std::optional<NearestEntry> nearest_entry(Store& store, const Key& key);
// What a miss with no nearest entry says, the lookup's reason and `snapcache why`'s alike: "no entry
// of component 'dit' for this checkpoint yet: this model's first load".
SNAPCACHE_API std::string first_load_reason(const Key& key);
// The words that name a nearest entry in a miss's reason: "(same component and checkpoint)".
inline constexpr const char* kNearestEntryWords = "same component and checkpoint";

}  // namespace snapcache
