// The plan's interrupt check (LoadPlan::interrupt_check, Python's KeyboardInterrupt), asked between
// two stages of a load.
#pragma once

#include <string>

#include "snapcache/pipeline.h"

namespace snapcache::load_plan {

// Ok, or the check's failure as the stage `next` would have failed ("interrupted before next").
Status interruption(const LoadPlan& plan, const std::string& next);

}  // namespace snapcache::load_plan
