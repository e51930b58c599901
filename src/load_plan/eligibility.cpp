#include "load_plan/eligibility.h"

namespace snapcache {

const char* to_string(NotCached reason) {
  switch (reason) {
    case NotCached::no_store: return "no_store";
    case NotCached::disabled: return "disabled";
    case NotCached::opted_out: return "opted_out";
    case NotCached::no_checkpoint_identity: return "no_checkpoint_identity";
    case NotCached::no_loader_identity: return "no_loader_identity";
    case NotCached::unidentified_checkpoint: return "unidentified_checkpoint";
  }
  return "?";
}

namespace load_plan {

Eligibility eligibility(const Store* store, const LoadPlan& plan) {
  if (!plan.no_cache_reason.empty()) return {NotCached::opted_out, plan.no_cache_reason};
  if (store == nullptr) return {NotCached::no_store, "no cache store is configured"};
  if (Status usable = store->usable(); usable.code() == StatusCode::disabled)
    return {NotCached::disabled, usable.message()};
  return plan_eligibility(plan);
}

Eligibility plan_eligibility(const LoadPlan& plan) {
  if (!plan.no_cache_reason.empty()) return {NotCached::opted_out, plan.no_cache_reason};
  // A key that names neither the weights' source nor the code that prepared them would hand one
  // model's weights to another load (two loaders, one entry): such a load is never cached.
  if (plan.checkpoint_files.empty() && plan.weights_identity.empty())
    return {NotCached::no_checkpoint_identity,
            "the plan names no checkpoint files and no weights_identity, so the key cannot tell these weights from "
            "another model's (set checkpoint_files, or weights_identity for weights that come from no file)"};
  if (plan.source_identity.empty())
    return {NotCached::no_loader_identity,
            "the plan has no source_identity, so a changed loader would be served the old loader's weights (set it "
            "to digest_source_files of the loader's files, or to a version you change with the loader)"};
  return {};
}

Eligibility unidentified_checkpoint(const Status& why) {
  return {NotCached::unidentified_checkpoint, "the checkpoint cannot be identified: " + why.message()};
}

}  // namespace load_plan
}  // namespace snapcache
