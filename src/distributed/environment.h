// What torchrun and friends put in the environment about a rank: read and checked in one place.
#pragma once

#include <string>

#include "snapcache/status.h"

namespace snapcache::distributed {

struct RankEnvironment {
  std::string master_addr;
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // LOCAL_RANK, else RANK
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent serves the store
  // TORCHELASTIC_RESTART_COUNT: torchrun's agent store outlives the workers it restarts, so each
  // attempt's keys are its own (torch.distributed's own keys are kept apart the same way).
  int restart_count = 0;
};

// The most ranks a group from the environment can have: rank 0's (or the agent's) c10d store
// holds one connection for every rank, and a process holds at most 2^20 descriptors (Linux's
// default fs.nr_open). A larger WORLD_SIZE is refused before anything waits for ranks that cannot
// all connect.
inline constexpr int kMaxWorldSize = 1 << 20;

// An error names the variable that is missing or invalid, its value, and what it may be.
Result<RankEnvironment> read_rank_environment();

}  // namespace snapcache::distributed
