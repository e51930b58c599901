// The library's own NCCL group over a c10d store (built where torch's NCCL headers are found;
// elsewhere it says so).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "distributed/environment.h"
#include "distributed/group_membership.h"
#include "snapcache/rank_group.h"

namespace snapcache::distributed {

// After NCCL's own rendezvous over `store`, the rank checks once more that no other process claims
// it (`membership`); the group's messages carry the membership's start nonce.
Result<std::shared_ptr<RankGroup>> nccl_group(c10::intrusive_ptr<c10d::Store> store, const RankEnvironment& env,
                                              std::string description, RankGroupOptions options,
                                              const GroupMembership& membership);

}  // namespace snapcache::distributed
