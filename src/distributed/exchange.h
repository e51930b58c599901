// The two ways ranks exchange messages: over a c10d backend's all-gather (the caller's Gloo or
// NCCL group, or the library's NCCL group), or over c10d's TCPStore.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "distributed/group_membership.h"
#include "snapcache/rank_group.h"

namespace snapcache::distributed {

// All-gathers length-prefixed messages as uint8 tensors on `device` (CPU for Gloo, the rank's
// CUDA device for NCCL). `owner` keeps whatever the backend needs alive (its process group);
// `start_nonce` is the group's (RankGroup::start_nonce), empty for a caller's process group.
std::shared_ptr<RankGroup> backend_exchange(c10::intrusive_ptr<c10d::Backend> backend, c10::Device device,
                                            std::string description, RankGroupOptions options,
                                            std::shared_ptr<void> owner = nullptr, std::string start_nonce = {});

// Each rank sets its message under a key of its own and waits for every other rank's, within
// the timeout. `serves_store`: this process hosts the store, so it waits for every rank to read the
// last exchange (or its reason for leaving) before the group goes away. Before and after each
// exchange the rank checks that no other process claims its rank (`membership`); if one does, it
// leaves, and its reason is its message to the others, so that they fail at once with it.
std::shared_ptr<RankGroup> store_exchange(c10::intrusive_ptr<c10d::Store> store, GroupMembership membership,
                                          int size, bool serves_store, std::string description,
                                          RankGroupOptions options);

}  // namespace snapcache::distributed
