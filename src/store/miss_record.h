// Recording the keys of missed lookups (see key_files.cpp).
#pragma once

#include <string>

#include "snapcache/key.h"

namespace snapcache::store {

// Best effort and off the data path's FileSystem: a failure only loses the explanation.
void record_miss(const std::string& cache_directory, const Key& key, const std::string& id);

}  // namespace snapcache::store
