// What one group load is, the same on every rank of it: the fields of the plan's key that do not
// depend on the rank (component, source identity, dtype, precision policy, torch, options, and the
// tp and pp sizes: not tp_rank, pp_rank, topology.extra or the checkpoint files, whose identity is
// each rank's own view: its paths, inodes, and the digests its cache remembers), with the group's
// start nonce (RankGroup::start_nonce). Every message of the agreement carries it, so a message
// from another group's load, from another start of the group, or from a process of no group is
// refused by name.
#pragma once

#include <string>

#include "snapcache/pipeline.h"
#include "snapcache/rank_group.h"

namespace snapcache::agreement {

struct GroupIdentity {
  std::string id;     // 32 hex digits: XXH3-128 of the fields above and the nonce
  std::string about;  // "component dit, tp 2, pp 1, dtype bfloat16, ..., started as 5a3b1c"
  // "3fa2c1 (component dit, ...)"
  std::string name() const;
};

GroupIdentity group_identity(const LoadPlan& plan, const RankGroup& group);

}  // namespace snapcache::agreement
