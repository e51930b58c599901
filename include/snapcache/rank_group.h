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
  // How long one exchange waits for every rank, and how long making a group from the environment
  // waits for its store and for rank 0's start. A rank that died or hangs, a rank 0 that never
  // starts, a port whose program never answers: each makes the others fail with one line after
  // this long (and a fraction of a second) instead of waiting for ever.
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
  // What tells this start of the group apart from any other on the same channel: a random nonce
  // rank 0 made when it started the group and every rank read (a group from the environment), the
  // same on every rank. Empty where the channel admits no other process (a caller's process group:
  // its connections were made by torch.distributed's rendezvous). A load's messages carry it.
  virtual std::string start_nonce() const;
  // This rank leaves the group's load and makes no more exchanges: a rank that found something
  // only it can see (its own message overwritten in the store) says why where the channel allows
  // (over the store, as its next message), so the others fail at once with `reason` instead of
  // after the timeout. The group is unusable afterwards.
  virtual void leave(const std::string& reason);
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

// From MASTER_ADDR, MASTER_PORT (default 29500), RANK, WORLD_SIZE (at most 2^20) and, for NCCL,
// LOCAL_RANK (else RANK). Rank 0 serves the store unless TORCHELASTIC_USE_AGENT_STORE=True
// (torchrun's agent serves it, and TORCHELASTIC_RESTART_COUNT keeps each attempt's keys apart).
// Rank 0 starts the group (its nonce); every rank claims its rank. Waits at most
// `options.timeout` in all. An error is one line: the variable that is missing or invalid; a store
// nothing answers for, or a program that is not one; another group on the same port, or another
// process holding the same rank (both are refused, naming each other).
SNAPCACHE_API Result<std::shared_ptr<RankGroup>> rank_group_from_environment(GroupTransport transport,
                                                                             RankGroupOptions options = {});

}  // namespace snapcache
