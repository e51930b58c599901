// Whether a load may be cached, and if not, why: the one answer every tier is given
// (LoadContext::ineligible) and the report keeps (LoadReport::not_cached).
#pragma once

#include <optional>
#include <string>

#include "snapcache/pipeline.h"

namespace snapcache::load_plan {

struct Eligibility {
  std::optional<NotCached> not_cached;  // unset: the load may be cached
  std::string reason;                   // a line a person can act on
  explicit operator bool() const { return !not_cached; }
};

// The plan's own reasons, then the store's: a load is cached only when a store is configured and
// enabled, the caller did not opt out, and the key can tell these weights from any others (a
// checkpoint file or a weights identity, and a loader identity). An unavailable store (one that
// cannot be used) is not a reason here: the snapshot tier answers it as a fallback.
Eligibility eligibility(const Store* store, const LoadPlan& plan);

// The plan's reasons alone (opted out; a key that names no weights or no loader): what a tier that
// needs no disk store (the GPU donor tier) checks when the load has no store.
Eligibility plan_eligibility(const LoadPlan& plan);

// When the checkpoint's files cannot be described (stat failed, a digest could not be read).
Eligibility unidentified_checkpoint(const Status& why);

}  // namespace snapcache::load_plan
