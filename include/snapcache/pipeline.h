// The load pipeline a model server links in: one call takes a load plan and returns the model's
// device tensors and a report, bit-identical whichever tier served them.
//
//   key + eligibility
//   -> tiers, in order, until one serves (default: disk snapshot, then the ordinary loader, whose
//      result the snapshot tier publishes)
//   -> post-load methods (CPU) -> mixed-precision validation -> uploader   (host tensors only)
//   -> derived-buffer refresh
//
// load_model and reload_model never throw: an exception from libtorch or from a hook of the plan
// (ordinary loader, post-load method, refresh hook, tier, uploader) comes back as a Status.
//
// This header and what it includes (store.h, config.h, key.h, dtype.h, status.h) are a loader's
// whole surface: no entry format, no seam, and one outcome vocabulary: Status (a load's, its
// publication's: PublicationReport) and the load's path (LoadPath). The store's own answers to
// publish and lookup (snapcache/extend/store_access.h) are for those who call the store directly. Tiers, uploaders, post-load methods, file systems and
// the host storages they share are for people who extend snapcache (snapcache/extend/); a plan
// only holds them by pointer. tests/surface/check_surface.cmake holds this.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "snapcache/dtype.h"
#include "snapcache/export.h"
#include "snapcache/key.h"
#include "snapcache/named_tensors.h"
#include "snapcache/status.h"
#include "snapcache/store.h"

namespace snapcache {

// Named only by pointer here; defined for their authors in snapcache/extend/ (tier.h, uploader.h,
// post_load.h) and in snapcache/rank_group.h.
class Tier;
class Uploader;
class PostLoadMethod;
class RankGroup;

using DerivedBuffers = std::map<std::string, at::Tensor>;

// Rebuilds derived, cross-layer buffers (fused norm weights, RoPE tables, ...) from the weights.
// A hook creates its buffer if absent and otherwise copies into the existing one in place, so its
// storage address never changes (captured CUDA graphs keep working). See refresh_buffer().
struct RefreshHook {
  std::string name;
  std::function<Status(const NamedTensors& weights, DerivedBuffers& buffers, c10::Device device)> refresh;
};
// Puts `value` into buffers[name]: allocates it the first time, copies in place afterwards.
SNAPCACHE_API Status refresh_buffer(DerivedBuffers& buffers, const std::string& name, const at::Tensor& value,
                                    c10::Device device);

// What a load did: which path it took and why, every tier it tried and what each answered, and
// every stage with its time, its bytes and, for a stage that failed, its error.
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

// What a load's publication did, in the loader's words: a Status (as everywhere at the boundary)
// and what it concerned. `status` ok: the entry is in the cache, written by this publication
// (`written`) or already there (another process, or an earlier load, published it). Not ok: it is
// not, and the status says why with the store's code and reason ("no_space: the entry (12.0 GiB)
// does not fit ..."); `skipped` then tells a publication not attempted for a reason that is no
// failure (the cache disabled or unavailable, an entry too large, another process writing it; also
// wait() on a Publication never started) from a storage failure (nothing half-written remains).
struct PublicationReport {
  Status status;
  bool written = false;  // with an ok status: this publication wrote the entry
  bool skipped = false;  // with a non-ok status: not attempted, not a failure
  std::string entry_id;
  std::uint64_t bytes = 0;  // the entry's data bytes
  double seconds = 0;
  // What made room for it, in words ("evicted 2 entries (3.1 GiB) to make room: 58cd8e9c52a3 (dit,
  // 1.5 GiB), ..."), "" when nothing did; and the ids of those entries, least recently used first.
  std::string evictions;
  std::vector<std::string> evicted;

  bool failed() const { return !status.is_ok() && !skipped; }
  // "published", "already_present", "skipped" or "failed": how reports and a group's ranks say it.
  SNAPCACHE_API const char* outcome() const;
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
  std::optional<PublicationReport> publish;  // when the load waited for its publication
  std::optional<GroupReport> group;  // set for a load in a rank group
  // On a hit, how much of the served bytes were compared with their checksums during this load:
  // the upload engine checks every chunk it stages; the rest was trusted because the files'
  // identities (device, inode, size, mtime, ctime) are those their last full check recorded.
  std::uint64_t bytes_checked = 0;
  std::uint64_t bytes_trusted = 0;
  SNAPCACHE_API std::string integrity() const;  // those two in words, "" when no file was read
  // The bytes of the files the load read its weights from: on a hit, the served entry's data
  // files; on a load from the checkpoint, the plan's checkpoint_files (0 when it names none).
  std::uint64_t file_bytes = 0;
  // Of those, the bytes that were not in the page cache when the load began to read them, so came
  // from the disk (sampled: 1,024 pages of each file, in 64 runs spread over it): on a hit, when the
  // tier served them; from the checkpoint, when the ordinary loader started (a checkpoint hashed for
  // the key, LoadPlan::hash_checkpoint_contents, was read by then). What a first load, or a restart
  // after a reboot or under memory pressure, pays; page_cache() says it in words, with the time of
  // the stages that read it (a hit: read-ahead, upload; from the checkpoint: the ordinary load,
  // post-load, the upload) and, on a hit with a quarter or more of the entry from the disk, the
  // rate that makes (a loader reads what it needs of a checkpoint, which the library does not see).
  // A CPU hit has no upload: its tensors are handed out over the entry's mapping, whose pages come
  // from the disk as the caller first uses them, at no rate the load sees.
  std::uint64_t bytes_from_disk = 0;
  SNAPCACHE_API std::string page_cache() const;  // "" when every byte was in the page cache
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
  // Records nothing: the stage turned out not to happen (a CPU load's upload hands the host
  // tensors out as they are), and a report lists only stages that did.
  void skip();

 private:
  void record(std::uint64_t bytes, std::string error);
  LoadReport* report_;
  std::string stage_;
  std::chrono::steady_clock::time_point started_;
  bool recorded_ = false;
};

// A cold load's publication, running in the background. The load call returns when the weights
// are on the device; the snapshot is written, hashed and published atomically on another thread
// meanwhile, from host tensors no one writes (the load waits for it before a post-load method
// that may write in place, and before handing out host tensors that are the published ones).
// A process that exits waits for its publications (the library does so at exit); one that dies
// mid-publication leaves no entry, only a temporary directory that gc removes.
class SNAPCACHE_API Publication {
 public:
  Publication() = default;  // none was started
  explicit Publication(std::shared_future<PublicationReport> report) : report_(std::move(report)) {}

  bool started() const { return report_.valid(); }
  bool pending() const;  // started and not finished
  // Blocks until it finished and returns its report; without one, skipped ("no publication was
  // started").
  PublicationReport wait() const;

 private:
  std::shared_future<PublicationReport> report_;
};

// Blocks until every background publication this process started has finished, and the host
// tensors of loads from the checkpoint, freed on a thread of their own once the weights are on the
// device, are freed.
SNAPCACHE_API void wait_for_publications();

// The built-in post-load methods a plan lists (LoadPlan::post_load), and the precision policy.
enum class WeightLayout { row_major, column_major };

// INT8 per-row quantized linear weights: "<p>.weight" (int8, [N, K]) with "<p>.weight_scale"
// stored with its constructor shape (N, 1) in float32. Flattens the scale to (N,), and gives the
// weight the column-major layout (t().contiguous().t()) when the kernel wants it.
SNAPCACHE_API std::shared_ptr<PostLoadMethod> int8_row_scale_method(WeightLayout weight_layout = WeightLayout::row_major);

// FP8 (e4m3fn) block-scaled weights: "<p>.weight" [N, K] row-major with "<p>.weight_scale"
// float32 [ceil(N/128), ceil(K/128)], one scale per 128x128 block. Checks the block grid and
// gives the scales the column-major (MN-major) layout that block-scaled GEMM kernels read. Other
// block sizes or weight layouts are rejected with an error that names the tensor.
SNAPCACHE_API std::shared_ptr<PostLoadMethod> fp8_block_scale_method(std::int64_t block_rows = 128, std::int64_t block_cols = 128);

// FP16 and INT8 layout conversion of the 2-d tensors whose names end with one of `suffixes`.
// Other dtypes under those names are rejected with an error that names the tensor.
SNAPCACHE_API std::shared_ptr<PostLoadMethod> layout_method(std::vector<std::string> suffixes, WeightLayout layout);

// Mixed precision: the first rule whose suffix ends a tensor's name gives the dtypes it may have.
struct PrecisionRule {
  std::string suffix;
  std::vector<DType> allowed;
};
struct PrecisionPolicy {
  std::string name;  // part of the cache key, e.g. "w8a16-fp8mlp"
  std::vector<PrecisionRule> rules;
};
// Every tensor must match a rule and have one of its dtypes; the error names the tensor.
SNAPCACHE_API Status validate_precision(const NamedTensors& tensors, const PrecisionPolicy& policy);

// Takes a streaming loader's tensors as it makes them (LoadPlan::streaming_loader).
class SNAPCACHE_API TensorSink {
 public:
  virtual ~TensorSink();
  // Takes the load's next tensors, in load order, from the thread that runs the loader (or one
  // thread at a time). Nothing may change them afterwards: a cold load may be uploading them while
  // the loader makes the rest. A loader returns a failed Status.
  virtual Status put(NamedTensors tensors) = 0;
};

struct LoadPlan {
  // What is loaded: the key.
  std::vector<std::string> checkpoint_files;
  std::string component;
  std::string source_identity;  // digest of the loader code (digest_source_files) or a version
  std::string dtype;            // the load dtype, e.g. "bfloat16"
  PrecisionPolicy precision;
  Topology topology;
  std::map<std::string, std::string> options;
  bool hash_checkpoint_contents = false;  // add content digests (memoized) to the key
  // What identifies the weights when no checkpoint file does (weights built in code, fetched by
  // another system): a version or a digest, kept in the key. A plan with neither checkpoint files
  // nor this, or without a source_identity, is not cached: its key could not tell its weights
  // from another load's (LoadReport::not_cached says which).
  std::string weights_identity;

  // Not empty: this load is not cached, for this reason ("fused LoRA adapter checkpoint"); it
  // takes the ordinary path and the report says why.
  std::string no_cache_reason;

  // The TP-local logical tensors the model declares (names, dtypes, shapes).
  ExpectedLayout expected;
  // The ordinary loader: reads the checkpoint, shards, fuses. Its output must match `expected`.
  std::function<Result<NamedTensors>(const LoadPlan&)> ordinary_loader;
  // The ordinary loader in a form that hands its tensors over as it makes them (a layer at a
  // time, say): what it puts, in order, is what ordinary_loader would return, and it returns once it
  // has put everything. A cold load runs the post-load methods and the upload of each part while
  // the loader makes the next, when every method allows it (MethodProperties::applies_per_part),
  // so the upload ends soon after the loader; the weights are those the whole would give. Used
  // when ordinary_loader is not set.
  std::function<Status(const LoadPlan&, TensorSink&)> streaming_loader;
  std::vector<std::shared_ptr<PostLoadMethod>> post_load;
  c10::Device device = c10::Device(c10::kCPU);
  std::vector<RefreshHook> refresh_hooks;

  // The sources tried in order; empty: default_tiers() (the disk snapshot, then the ordinary
  // loader). Put a GPU donor tier in front to attach prepared weights.
  std::vector<std::shared_ptr<Tier>> tiers;
  // Ranks that load together (a TP/PP group): every rank takes the same tier, the best one every
  // rank can serve, and a load from the checkpoint returns once every rank has published (see
  // snapcache/rank_group.h, docs/scale-out.md). Every rank must list the same tiers. Null: this
  // rank decides alone.
  std::shared_ptr<RankGroup> group;
  // Host to device; null: the upload engine for loads of 64 MiB or more onto CUDA devices, else
  // per_storage_uploader().
  std::shared_ptr<Uploader> uploader;
  // A cold load publishes its snapshot on another thread while post-load and upload go on
  // (LoadedModel::publication). Off: the load returns after the publication.
  bool publish_in_background = true;
  // Asked between the stages of a load, on the thread that called load_model: before each tier
  // (so after the key), after the tier that served (before anything keeps its result), after
  // post-load and after the upload. A failed Status ends the load there with that Status, as a
  // failure of the next stage would: nothing is published from a load stopped before keep(), a
  // publication already started finishes as for any failed load (it renames a whole entry into
  // place; the process waits for it at exit), and in a group every rank fails through the usual
  // exchanges. Null: never asked. The Python package sets one that runs the interpreter's signal
  // handlers, so a Ctrl-C during a long stage stops the load at the next boundary (docs/python.md).
  std::function<Status()> interrupt_check;
};

struct LoadedModel {
  NamedTensors weights;  // on plan.device, after post-load methods
  DerivedBuffers derived;
  LoadReport report;
  // A cold load's publication, when it still runs in the background (report.publish is then
  // unset); wait() for its PublicationReport. A CPU load hands out the tensors it publishes: the
  // publication writes only the bytes they had when they were handed out, else it fails (mismatch)
  // and keeps nothing, and the key's next load publishes a copy (where neither a fingerprint nor a
  // copy can be taken, and in a group, which waits for every rank's publication anyway, the load
  // waits for it).
  Publication publication;
};

// `store` may be null: then every load is ineligible ("no cache store is configured").
SNAPCACHE_API Result<LoadedModel> load_model(Store* store, const LoadPlan& plan);

// Loads again (from whichever tier serves) and copies the result into `model`'s existing tensors
// in place, then runs the refresh hooks: no weight or buffer changes its address.
SNAPCACHE_API Result<LoadReport> reload_model(Store* store, const LoadPlan& plan, LoadedModel& model);

// Runs the plan's loader, ordinary_loader or else streaming_loader, and returns everything it made,
// in order: nothing checked, nothing cached. A streaming loader's parts are also put to `also`.
SNAPCACHE_API Result<NamedTensors> run_ordinary_loader(const LoadPlan& plan, TensorSink* also = nullptr);

// Completeness of an ordinary load: every expected name present, none extra, dtypes and shapes as
// declared.
SNAPCACHE_API Status check_completeness(const NamedTensors& tensors, const ExpectedLayout& expected);

// Moves tensors to `device` with per_storage_uploader(), so aliases stay aliases.
SNAPCACHE_API Result<NamedTensors> upload_tensors(const NamedTensors& tensors, c10::Device device);

// The key a plan loads under (checkpoint identities from stat, memoized digests if asked).
SNAPCACHE_API Result<Key> key_for_plan(Store& store, const LoadPlan& plan);

}  // namespace snapcache
