// The fields of a plan's key besides the checkpoint identities, filled in one place.
#pragma once

#include "snapcache/key.h"
#include "snapcache/pipeline.h"

namespace snapcache::load_plan {

Key key_with_checkpoint(const LoadPlan& plan, std::vector<CheckpointFile> checkpoint);

}  // namespace snapcache::load_plan
