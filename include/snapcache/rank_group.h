// Ranks that load together agree. A tensor- or pipeline-parallel group loads one model on every
// rank at once; if one rank took the snapshot while a peer ran the ordinary loader (which may
// call collectives), the group would deadlock or mix weights. A plan with a group (LoadPlan::group)
// therefore agrees on one tier for all ranks before any rank loads, and on the publication after:
// see docs/scale-out.md.
//
// A RankGroup is the channel the agreement talks over: torch's own distributed engine (c10d),
// either the caller's process group (Gloo, NCCL) or one the library makes from the environment
// torchrun and friends set (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE).
#pragma once

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/status.h"

namespace c10d {
class ProcessGroup;
}

namespace snapcache {

struct RankGroupOptions {
  // How long one exchange waits for every rank. A rank that died or hangs makes the others fail
  // with an error after this long instead of waiting for ever.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

class SNAPCACHE_API RankGroup {
 public:
  virtual ~RankGroup();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo process group", "NCCL (library's, from the environment)", ...
  virtual std::string describe() const = 0;
  // Every rank's message, in rank order. Collective: every rank calls it, in the same sequence as
  // the others. An error (a peer that died, a timeout) leaves the group unusable.
  virtual Result<std::vector<std::string>> exchange(const std::string& mine) = 0;
};

// Over the caller's process group (torch.distributed's): its CPU backend when it has one (Gloo),
// else its CUDA backend (NCCL) with messages on `cuda_device` (default: the current CUDA device).
SNAPCACHE_API Result<std::shared_ptr<RankGroup>> rank_group_over(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                                 RankGroupOptions options = {});

// What the library makes from the environment.
enum class GroupTransport {
  store,  // c10d's TCPStore (the rendezvous torch.distributed itself uses); CPU only
  nccl,   // a c10d NCCL process group over that store, on the rank's CUDA device (LOCAL_RANK)
};
SNAPCACHE_API const char* to_string(GroupTransport transport);

// From MASTER_ADDR, MASTER_PORT (default 29500), RANK, WORLD_SIZE and, for NCCL, LOCAL_RANK (else
// RANK). Rank 0 serves the store unless TORCHELASTIC_USE_AGENT_STORE=True (torchrun's agent serves
// it). An error names the variable that is missing or invalid.
SNAPCACHE_API Result<std::shared_ptr<RankGroup>> rank_group_from_environment(GroupTransport transport,
                                                                             RankGroupOptions options = {});

}  // namespace snapcache
