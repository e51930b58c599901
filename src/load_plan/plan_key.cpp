// The key a plan loads under.
#include "load_plan/plan_key.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/key.h"

namespace snapcache {

Key load_plan::key_with_checkpoint(const LoadPlan& plan, std::vector<CheckpointFile> checkpoint) {
  Key key;
  key.checkpoint = std::move(checkpoint);
  key.source_identity = plan.source_identity;
  key.torch = current_torch_identity();
  key.dtype = plan.dtype;
  key.precision_policy = plan.precision.name;
  key.topology = plan.topology;
  key.component = plan.component;
  key.options = plan.options;
  // Weights that come from no file are identified by what the caller says identifies them.
  if (!plan.weights_identity.empty()) key.options["snapcache.weights_identity"] = plan.weights_identity;
  return key;
}

Result<Key> key_for_plan(Store& store, const LoadPlan& plan) {
  auto files = describe_checkpoint(store.fs(), plan.checkpoint_files);
  if (!files) return files.status();
  // An unavailable store keeps no memo and falls back whatever the key: reading every checkpoint
  // byte for it would only slow the load down.
  if (plan.hash_checkpoint_contents && store.unavailable().is_ok()) {
    DigestMemo memo = store.digest_memo();
    SNAPCACHE_RETURN_IF_ERROR(memo.fill_digests(*files));
  }
  return load_plan::key_with_checkpoint(plan, std::move(*files));
}

}  // namespace snapcache
