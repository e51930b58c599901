// Counters of lookup and publication outcomes, shared by every process that uses a cache
// directory: <dir>/stats.json, a JSON object of counters and, for the lookups and publications,
// the counts of each of the last 7 days' hours (CacheCounters::history).
//
// Counting must never slow or fail a load: updates go through the store's FileSystem like every
// file of the cache, skip fsync, and ignore errors; a lookup's count gives up after 10 ms of
// contention, a publication's or an eviction's (off the load's path) after 2 s. A
// file torn by a crash reads as zeros. Each update replaces the file whole (a temporary file
// renamed over it, util/atomic_file.h), never writes it in place, so a hard link or symlink
// planted as stats.json never carries counter bytes to a file outside the cache, and a reader
// sees the old counters or the new. Writers take turns under flock on the cache directory (the
// file they replace cannot be the lock); a stats.json with more than one name reads as zeros.
#pragma once

#include <string>

#include "snapcache/extend/file_system.h"
#include "snapcache/maintenance.h"

namespace snapcache::store {

enum class Counter {
  hit, miss, damaged, fallback, published, already_present, publish_skipped, publish_failed, evicted,
};

void bump_counter(FileSystem& fs, const std::string& cache_directory, Counter counter);
Result<CacheCounters> read_counters(FileSystem& fs, const std::string& cache_directory);
Status zero_counters(FileSystem& fs, const std::string& cache_directory);

}  // namespace snapcache::store
