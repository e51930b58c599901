// Marks the post-load methods snapcache ships (int8 row scales, FP8 block scales, layouts), so a
// rule that trusts only those can tell them from a user's method of the same name.
#pragma once

#include "snapcache/post_load.h"

namespace snapcache::pipeline {

struct BuiltInMethod {};

inline bool is_built_in(const PostLoadMethod& method) { return dynamic_cast<const BuiltInMethod*>(&method) != nullptr; }

}  // namespace snapcache::pipeline
