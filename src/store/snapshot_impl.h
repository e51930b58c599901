// What a Snapshot holds: the entry's manifest, one private mapping per data file, and the shared
// lease that keeps evictors away while any of it is in use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/manifest.h"

namespace snapcache {

struct Snapshot::Impl {
  std::string id;
  std::string path;
  Manifest manifest;
  std::vector<MappedRegion> mappings;  // one per data file
  std::vector<UniqueFd> data_files;    // the descriptors the lookup checked and mapped, kept open
  UniqueFd lease;
  std::shared_ptr<FileSystem> fs;      // the store's: readers of `data_files` go through it
};

}  // namespace snapcache
