// What a load did: which path it took and why, every tier it tried and what each answered, and
// every stage with its time, its bytes and, for a stage that failed, its error.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/store.h"

namespace snapcache {

enum class LoadPath {
  hit,         // warm: a cache tier (the disk snapshot, a GPU donor) served the weights
  miss,        // cold: no cache tier had them; the ordinary loader ran (and the result was kept)
  fallback,    // cold: a cache tier had them but could not use them (damaged, storage failure)
  ineligible,  // cold: this load must not be cached (adapter, opt-out, cache disabled)
};
SNAPCACHE_API const char* to_string(LoadPath path);

// What one tier answered.
enum class TierOutcome {
  served,    // it gave the weights
  missed,    // it has nothing for this load (a cold cache)
  unusable,  // it had something but could not use it (damaged, storage failure): a fallback
  skipped,   // it does not apply to this load (no cache, disabled, opted out)
};
SNAPCACHE_API const char* to_string(TierOutcome outcome);

// Why a load was not cached (LoadPath::ineligible).
enum class NotCached {
  no_store,                 // no cache store is configured
  disabled,                 // the cache is switched off by configuration
  opted_out,                // the plan says not to (LoadPlan::no_cache_reason)
  no_checkpoint_identity,   // no checkpoint files and no weights identity: the key names no weights
  no_loader_identity,       // no source identity: the key names no loader
  unidentified_checkpoint,  // the checkpoint's files could not be described
};
SNAPCACHE_API const char* to_string(NotCached reason);

struct TierAttempt {
  std::string tier;  // "snapshot", "ordinary", ...
  TierOutcome outcome = TierOutcome::missed;
  std::string reason;
};

struct StageTime {
  std::string stage;
  double seconds = 0;
  std::uint64_t bytes = 0;
  std::string error;  // empty when the stage finished
};

// What the ranks of a group load agreed (LoadPlan::group); `tier`, `decision` and `publication`
// read the same on every rank.
struct GroupReport {
  int rank = 0;
  int size = 1;
  std::string tier;         // the tier every rank took
  // Why: "rank 3: snapshot unusable (entry 3f2a...: damaged ...); the group took the ordinary path".
  std::string decision;
  // After a load from the checkpoint: "published on ranks 0-7", or which ranks did not publish and
  // why (the group's next load takes the ordinary path again); empty when nothing was to publish.
  std::string publication;
  std::vector<std::string> ranks;  // each rank's answers, in rank order: "snapshot missed, ordinary served"
  double agreement_seconds = 0;    // in exchanges, waiting for the slowest rank included
};

struct LoadReport {
  LoadPath path = LoadPath::miss;
  std::string reason;  // why this path: the answer of the tier that decided it
  std::optional<NotCached> not_cached;  // why the load could not be cached, when it could not
  // What the load assumed on the caller's behalf ("source_identity: a digest of loader.py, the
  // default for a Python loader"); each is part of the summary.
  std::vector<std::string> notes;
  std::string entry_id;
  std::vector<TierAttempt> tiers;  // in the order tried, up to the one that served
  std::vector<StageTime> stages;
  std::optional<PublishOutcome> publish;
  std::optional<GroupReport> group;  // set for a load in a rank group
  // On a hit, how much of the served bytes were compared with their checksums during this load:
  // the upload engine checks every chunk it stages; the rest was trusted because the files'
  // identities (device, inode, size, mtime, ctime) are those their last full check recorded.
  std::uint64_t bytes_checked = 0;
  std::uint64_t bytes_trusted = 0;
  SNAPCACHE_API std::string integrity() const;  // those two in words, "" when no file was read
  double seconds = 0;
  SNAPCACHE_API std::string summary() const;  // the one log line
  SNAPCACHE_API std::string table() const;    // stages, times and bytes, one per line
  // The lines of table(), without their newlines. A reason or an error in one may hold any text (a
  // tensor name from an entry, a peer's words): to print a line, make it printable().
  SNAPCACHE_API std::vector<std::string> table_lines() const;
};

// Times one stage into a report, by scope: a stage appears in the report however it ends. One
// that ends without done() or fail() (an early return, an exception) is recorded as interrupted.
class SNAPCACHE_API StageTimer {
 public:
  StageTimer(LoadReport& report, std::string stage);
  ~StageTimer();
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

  void done(std::uint64_t bytes = 0);
  // Records the error and hands it back: `return stage.fail(status);`
  Status fail(Status status);
  // Records a failure the caller goes on from (a tier that could not be used).
  void fail(std::string error);

 private:
  void record(std::uint64_t bytes, std::string error);
  LoadReport* report_;
  std::string stage_;
  std::chrono::steady_clock::time_point started_;
  bool recorded_ = false;
};

}  // namespace snapcache
