// Recording the keys of missed lookups (see key_files.cpp).
#pragma once

#include <string>

#include "snapcache/extend/file_system.h"
#include "snapcache/key.h"

namespace snapcache::store {

// Best effort, through the store's FileSystem like every file of the cache: a failure only loses
// the explanation. `reason` is the lookup's own words for the miss (the nearest entry and how its
// key differs), kept beside the key so `snapcache why` can say what caused it after the entry has
// been published.
void record_miss(FileSystem& fs, const std::string& cache_directory, const Key& key, const std::string& id,
                 const std::string& reason);

// The load of a missed key failed afterwards: `reason` is its error (<id>.failed), so `snapcache
// why` tells it from a miss. Best effort, as record_miss.
void record_failure(FileSystem& fs, const std::string& cache_directory, const Key& key, const std::string& id,
                    const std::string& reason);

// A publication of `key` found its sources changed under it (PublishOptions::expected_chunk_hashes):
// <id>.changed, `reason` the chunk that differed, so the key's next publication writes a copy. Best
// effort, as record_miss, and trimmed with the key's miss record.
void record_changed_sources(FileSystem& fs, const std::string& cache_directory, const Key& key, const std::string& id,
                            const std::string& reason);

// Whether `name` in misses/ is one record_miss writes (<id>.key, <id>.reason, <id>.failed, <id>.changed): gc removes others.
bool is_miss_record_name(const std::string& name);

}  // namespace snapcache::store
