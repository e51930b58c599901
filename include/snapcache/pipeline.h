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
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/post_load.h"
#include "snapcache/publication.h"
#include "snapcache/rank_group.h"
#include "snapcache/report.h"
#include "snapcache/snapshot.h"
#include "snapcache/tier.h"
#include "snapcache/uploader.h"

namespace snapcache {

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
  // unset); wait() for its outcome. The host tensors it writes are never handed out before it ends.
  Publication publication;
};

// `store` may be null: then every load is ineligible ("no cache store is configured").
SNAPCACHE_API Result<LoadedModel> load_model(Store* store, const LoadPlan& plan);

// Loads again (from whichever tier serves) and copies the result into `model`'s existing tensors
// in place, then runs the refresh hooks: no weight or buffer changes its address.
SNAPCACHE_API Result<LoadReport> reload_model(Store* store, const LoadPlan& plan, LoadedModel& model);

// Completeness of an ordinary load: every expected name present, none extra, dtypes and shapes as
// declared.
SNAPCACHE_API Status check_completeness(const NamedTensors& tensors, const ExpectedLayout& expected);

// Moves tensors to `device` with per_storage_uploader(), so aliases stay aliases.
SNAPCACHE_API Result<NamedTensors> upload_tensors(const NamedTensors& tensors, c10::Device device);

// The key a plan loads under (checkpoint identities from stat, memoized digests if asked).
SNAPCACHE_API Result<Key> key_for_plan(Store& store, const LoadPlan& plan);

}  // namespace snapcache
