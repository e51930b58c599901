// Who is in a group made from the environment, recorded in its c10d store: the group's start
// (a random nonce rank 0 makes when it starts the group, which every other rank reads) and, for
// each rank, the one process that holds it (a random token of its own, set only if no process
// holds the rank yet).
//
// The store has no authentication: anyone who reaches its port reads and writes every key, so
// none of this keeps an adversary out (docs/scale-out.md says what the exchange trusts). It tells
// groups apart: a second group started on the same MASTER_PORT, a rank given twice, a key left by
// an earlier attempt or written by a process of no group. Both processes that claim one rank are
// refused: the later one when it claims, the earlier one at its next exchange.
//
// Keys, under the group's prefix: "start", "rank/<r>/claim", "rank/<r>/contested".
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

#include "distributed/store_connection.h"
#include "snapcache/status.h"

namespace snapcache::distributed {

// A process, as a record in the store says it is (untrusted text: clipped, control characters
// replaced).
struct ProcessRecord {
  long pid = 0;
  std::string host;
  std::string describe() const;  // "pid 123 on node7"
};

struct GroupStart {
  std::string nonce;  // 32 hex digits
  int world = 0;
  ProcessRecord by;   // rank 0
  // "the group started by rank 0 (pid 123 on node7) as 5a3b1c, 2 ranks"
  std::string describe() const;
};

class GroupMembership {
 public:
  // This process joins as `rank` of `world`: rank 0 records the start (refused when the store
  // already holds another start: a second group on this port), every other rank waits for it
  // until `deadline` and checks the world size; then each claims its rank.
  static Result<GroupMembership> join(c10d::Store& store, int rank, int world, Deadline deadline);

  // A rank 0 that cannot serve its port (another process serves it): says so in the group there,
  // as a second claim on rank 0, so the rank 0 there is refused too. Returns that group's start,
  // when the store holds one by `deadline`.
  static Result<GroupStart> contest_rank_zero(c10d::Store& store, Deadline deadline);

  const GroupStart& start() const { return start_; }
  int rank() const { return rank_; }

  // Ok while no other process has claimed this rank; otherwise the refusal, naming both processes
  // and the group.
  Status unchallenged(c10d::Store& store) const;

 private:
  GroupStart start_;
  int rank_ = 0;
  ProcessRecord me_;
};

}  // namespace snapcache::distributed
