#include "support/kill_trials.h"

#include <cstdlib>
#include <random>
#include <thread>

#include "snapcache/maintenance.h"
#include "support/catch.h"
#include "support/child_process.h"
#include "support/raw_storages.h"
#include "support/temp_dir.h"

namespace snapcache::test {

KillCounts run_kill_trials(const KillTrials& trials) {
  // How long a whole write takes here, to spread the kills over it.
  auto t0 = std::chrono::steady_clock::now();
  {
    TempDir probe;
    REQUIRE(run_helper(kStoreHelper, trials.writer(probe.path())) == 0);
  }
  const auto full = std::chrono::steady_clock::now() - t0;
  const char* trials_env = std::getenv("SNAPCACHE_KILL_TRIALS");
  const int rounds = trials_env != nullptr ? std::max(1, std::atoi(trials_env)) : trials.rounds;
  std::mt19937 rng(trials.rng_seed);
  KillCounts counts;
  for (int round = 0; round < rounds; ++round) {
    TempDir cache;
    ChildProcess writer(kStoreHelper, trials.writer(cache.path()));
    REQUIRE(writer.wait_for_line("ready"));
    auto delay = std::chrono::duration_cast<std::chrono::microseconds>(full) * (rng() % 1000) / 1000;
    std::this_thread::sleep_for(delay);
    writer.kill_now();
    auto store = *Store::open(test_config(cache.path()));
    auto loaded = store->lookup(store_key(trials.seed), VerifyPolicy::always_rehash);
    INFO("round " << round << " killed after " << delay.count() << " us: " << to_string(loaded.result) << " "
                  << loaded.reason);
    REQUIRE((loaded.result == LookupResult::hit || loaded.result == LookupResult::miss));
    if (loaded.result == LookupResult::hit) {
      ++counts.whole;
      CHECK(same_data(*loaded.snapshot, raw_model(trials.seed, trials.mib)));
    } else {
      ++counts.none;
      // The dead writer's leftovers are recognised and collected, except one killed before it
      // had locked its lease (and marked it): nothing tells that from a live writer about to,
      // so gc gives such a directory an hour (docs/cli.md).
      (void)collect_garbage(*store, {.dry_run = DryRun::no, .grace_seconds = 0, .strays = false});
      for (const auto& left : list_names(cache.path() + "/tmp")) {
        INFO("left in tmp/: " << left);
        const std::string lease = cache.path() + "/tmp/" + left + "/lease";
        CHECK((!path_exists(lease) || file_size(lease) == 0));
      }
    }
  }
  CHECK(counts.whole + counts.none == rounds);
  return counts;
}

}  // namespace snapcache::test
