// The tier seam: a tier is a source of a load's weights. The load executor tries the plan's tiers
// in order (by default the disk snapshot, then the ordinary loader; a GPU donor goes in front of
// both) and takes the first that serves. Each tier answers in its own words, and the report lists
// every tier tried with its answer. The executor knows no tier by name.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "snapcache/export.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/pipeline.h"

namespace snapcache {

struct LoadPlan;

// Where served tensors are, and how far along they are.
enum class Residence {
  host,             // CPU tensors before post-load: post-load, precision checks and upload follow
  device_prepared,  // on the plan's device with post-load applied: only refresh hooks follow
};

// Whether the tensors came from a cache (the load is a hit) or from the checkpoint itself.
enum class Provenance { cache, source };

struct TierAnswer {
  TierOutcome outcome = TierOutcome::missed;
  std::string reason;    // one line a person can act on
  std::string entry_id;  // the cache entry it concerns, when there is one
  // When served:
  NamedTensors tensors;
  Residence residence = Residence::host;
  Provenance provenance = Provenance::cache;
  // With Residence::host: the served tensors' storages (describe_host_storages), each with where
  // its bytes also lie when the tier served it from a file (HostStorage::file). Left empty, the load
  // describes them itself.
  HostStorages storages;
  // With Residence::host: the tier checked `tensors` against the plan's declared layout itself
  // (check_completeness, or check_expected_layout on the records it made them from), so the load
  // does not check them a second time. Unset: the load checks them.
  bool layout_checked = false;
  // With Residence::host: the bytes of the files the tier read or will read the weights from (a
  // hit's data files, the checkpoint's) and, of them, those that were not in the page cache when
  // the tier looked, before anything read them (sampled): what the load takes from the disk. The
  // load reports them (LoadReport::file_bytes, bytes_from_disk) and, when some are off the page
  // cache, reads ahead what the post-load methods read. 0 where the tier cannot tell.
  std::uint64_t file_bytes = 0;
  std::uint64_t bytes_from_disk = 0;
  // With Residence::device_prepared: the derived buffers, already built where the weights were
  // prepared. The load hands them out as they are and runs no refresh hook (a hook writes in
  // place, and served memory may be shared). Unset: the refresh hooks build them.
  std::optional<std::map<std::string, at::Tensor>> derived;

  SNAPCACHE_API static TierAnswer served(NamedTensors tensors, Residence residence, Provenance provenance, std::string reason,
                           std::string entry_id = {});
  SNAPCACHE_API static TierAnswer missed(std::string reason, std::string entry_id = {});
  SNAPCACHE_API static TierAnswer unusable(std::string reason, std::string entry_id = {});
  SNAPCACHE_API static TierAnswer skipped(std::string reason);
};

// What a tier sees of the load it is asked to serve.
struct LoadContext {
  const LoadPlan& plan;
  Store* store = nullptr;    // the cache; null when none is configured
  const Key* key = nullptr;  // the disk key; null when this load must not be cached
  std::string ineligible;    // why it must not be cached (empty when it may)
  LoadReport& report;        // tiers time their stages into it (StageTimer)
  // Where a tier may hand over host tensors before it answers, as it makes them (the ordinary
  // tier does with a streaming loader): the load may prepare and upload them meanwhile. Its answer
  // decides: what was put counts only when the served tensors are exactly those, in order. Null
  // when the load does not take them.
  TensorSink* ahead = nullptr;
};

// What a tier did with weights it was offered to keep (Tier::keep).
struct Kept {
  std::string note;         // for the report's reason ("not published: ..."), "" when nothing to say
  Publication publication;  // set when it keeps them in the background: the load waits for it where
                            // it must (a method that writes in place, a failed load, a group)
  // Whether that publication needs the tensors keep() was given unchanged until it ends, so the
  // load waits for it before they can change; false when it writes a copy of its own, or only the
  // bytes it fingerprinted (PublishOptions::expected_chunk_hashes: a change fails it, keeping nothing).
  bool publication_needs_tensors_unchanged = true;
};

// The store's answer to a publication (Store::publish, publish_tensors) as a load reports it: ok
// when published or already present, `skipped` or failed with the store's status otherwise, the
// evicted entries in words. A tier that keeps weights in the background makes its Publication of
// these.
SNAPCACHE_API PublicationReport publication_report(const PublishOutcome& outcome);

class SNAPCACHE_API Tier {
 public:
  virtual ~Tier();
  virtual std::string name() const = 0;
  // Serves the weights, or says why not (missed, unusable, skipped). An error Status ends the
  // load: the ordinary loader failed, or its output is not what the plan declares.
  virtual Result<TierAnswer> serve(LoadContext& load) = 0;
  // After a later tier served host tensors read from the checkpoint (checked complete, before
  // post-load), each earlier tier that missed or could not be used is offered them, to keep for
  // the next load (the snapshot tier publishes them). The tensors must not change until a
  // publication it returns has ended.
  virtual Kept keep(LoadContext& load, const NamedTensors& tensors);
  // What this tier served turned out damaged before anything was handed out (an uploader found a
  // chunk whose checksum differs): the tier deals with its own copy (the snapshot tier quarantines
  // the entry), and the load runs again without it. Returns what it did, for the report's reason
  // ("was quarantined"), or "" when it keeps nothing.
  virtual std::string damaged(LoadContext& load, const std::string& entry_id, const Status& why);
  // The load this tier missed then failed (the ordinary loader raised, its output was not the
  // plan's, post-load or the upload failed): a tier that records misses records the failure, so
  // a failed load is never explained as a plain miss. Best effort; the load's error stands.
  virtual void load_failed(LoadContext& load, const Status& why);
};

// The disk tier: looks the key up in the store, checks the entry against the plan's expected
// layout, and serves CPU tensors over its private mapping; keeps a cold load by publishing it.
SNAPCACHE_API std::shared_ptr<Tier> snapshot_tier();
struct OrdinaryTierOptions {
  // When a quarter or more of a checkpoint file is not in the page cache as the loader starts, and
  // the load reads the checkpoint whole (onto a device, whose upload reads every byte; TP 1, PP 1:
  // a TP rank reads its slices), read the file whole, in order, on threads of the tier's own while
  // the loader runs, so the loader's page faults find its pages there (the demo at 8 GiB on the GPU
  // machine, page cache dropped: 4.2-4.5 s against 5.5 s, as fast as `dd` of the file;
  // docs/performance.md). Off: the loader's faults read what it needs.
  bool read_ahead = true;
};
// The plan's ordinary loader, with its output checked against the declared layout.
SNAPCACHE_API std::shared_ptr<Tier> ordinary_tier(const OrdinaryTierOptions& options = {});
// What a plan without tiers of its own uses: snapshot_tier(), then ordinary_tier().
SNAPCACHE_API std::vector<std::shared_ptr<Tier>> default_tiers();

}  // namespace snapcache
