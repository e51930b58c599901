// What every built-in post-load method declares (post_load.h, MethodProperties): it writes only
// new storages, reads only the tensors it names, applies to a load part by part, and ships with
// snapcache. A method adds its own
// limits (`unsupported`) to these.
#pragma once

#include "snapcache/extend/post_load.h"

namespace snapcache::methods {

inline MethodProperties built_in_properties() {
  MethodProperties p;
  p.writes = PostLoadWrites::new_storages_only;
  p.reads_only_targets = true;
  p.applies_per_part = true;
  p.built_in = true;
  return p;
}

}  // namespace snapcache::methods
