// Counters of lookup and publication outcomes, shared by every process that uses a cache
// directory: <dir>/stats.json, a JSON object of counters, updated in place under flock.
//
// Counting must never slow or fail a load: updates go through the POSIX file system (never an
// injected one), give up after a few milliseconds of contention, skip fsync, and ignore errors. A
// file torn by a crash reads as zeros. The file only grows (it is padded with spaces), so it is
// rewritten in place without truncation and no reader ever sees a half-renamed file.
#pragma once

#include <string>

#include "snapcache/maintenance.h"

namespace snapcache::store {

enum class Counter {
  hit, miss, damaged, fallback, published, already_present, publish_skipped, publish_failed, evicted,
};

void bump_counter(const std::string& cache_directory, Counter counter);
Result<CacheCounters> read_counters(const std::string& cache_directory);
Status zero_counters(const std::string& cache_directory);

}  // namespace snapcache::store
