// The two ways ranks exchange messages: over a c10d backend's all-gather (the caller's Gloo or
// NCCL group, or the library's NCCL group), or over c10d's TCPStore.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <functional>

#include "snapcache/rank_group.h"

namespace snapcache::distributed {

// All-gathers length-prefixed messages as uint8 tensors on `device` (CPU for Gloo, the rank's
// CUDA device for NCCL). `owner` keeps whatever the backend needs alive (its process group).
std::shared_ptr<RankGroup> backend_exchange(c10::intrusive_ptr<c10d::Backend> backend, c10::Device device,
                                            std::string description, RankGroupOptions options,
                                            std::shared_ptr<void> owner = nullptr);

// Each rank sets its message under a key of its own and waits for every other rank's. After a
// timed-out wait the store's connection is out of step (the server still owes it an answer), so
// `fresh_store` makes another connection to the same store to name the ranks that did not answer.
// `serves_store`: this process hosts the store, so it waits for every rank to read the last
// exchange before the group goes away.
std::shared_ptr<RankGroup> store_exchange(c10::intrusive_ptr<c10d::Store> store,
                                          std::function<c10::intrusive_ptr<c10d::Store>()> fresh_store, int rank,
                                          int size, bool serves_store, std::string description,
                                          RankGroupOptions options);

}  // namespace snapcache::distributed
