// The killed-writer harness: a helper process that writes an entry (publishes it, imports it) is
// killed with SIGKILL at a random moment, again and again, and each time the cache must hold the
// whole entry or none, with nothing of the dead writer's left that gc would not collect.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace snapcache::test {

struct KillTrials {
  // The helper's arguments for a writer into the cache directory given.
  std::function<std::vector<std::string>(const std::string& cache)> writer;
  int seed = 0;           // the entry written: raw_model(seed, mib) under store_key(seed)
  std::size_t mib = 1;
  int rounds = 12;        // SNAPCACHE_KILL_TRIALS overrides it (the long runs, docs/reliability.md)
  unsigned rng_seed = 1;
};

struct KillCounts {
  int whole = 0;
  int none = 0;
};

// Times one whole write first, then kills `rounds` writers, each after a random part of that time
// from its "ready" line. Checks each outcome with Catch (REQUIRE/CHECK).
KillCounts run_kill_trials(const KillTrials& trials);

}  // namespace snapcache::test
