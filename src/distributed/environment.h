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
};

// An error names the variable that is missing or invalid and its value.
Result<RankEnvironment> read_rank_environment();

}  // namespace snapcache::distributed
