// The key a plan loads under.
#include "pipeline/plan_key.h"

namespace snapcache {

Key pipeline::key_with_checkpoint(const LoadPlan& plan, std::vector<CheckpointFile> checkpoint) {
  Key key;
  key.checkpoint = std::move(checkpoint);
  key.source_identity = plan.source_identity;
  key.torch = current_torch_identity();
  key.dtype = plan.dtype;
  key.precision_policy = plan.precision.name;
  key.topology = plan.topology;
  key.component = plan.component;
  key.options = plan.options;
  return key;
}

Result<Key> key_for_plan(Store& store, const LoadPlan& plan) {
  auto files = describe_checkpoint(store.fs(), plan.checkpoint_files);
  if (!files) return files.status();
  // An unavailable store keeps no memo and falls back whatever the key: reading every checkpoint
  // byte for it would only slow the load down.
  if (plan.hash_checkpoint_contents && store.unavailable_reason().empty()) {
    DigestMemo memo = store.digest_memo();
    SNAPCACHE_RETURN_IF_ERROR(memo.fill_digests(*files));
  }
  return pipeline::key_with_checkpoint(plan, std::move(*files));
}

}  // namespace snapcache
