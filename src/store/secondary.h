// The secondary store: a read-only cache directory (a network file system the fleet shares, say)
// searched after a local miss. An entry found there is copied into the local cache through the
// verifying entry writer (store/entry_stream.h), every chunk proven, and then served locally as
// any entry is. The secondary directory is untrusted and never changed: nothing is written, locked
// (it may be mounted read-only, and others' evictions there are theirs), repaired or quarantined.
#pragma once

#include <string>

#include "snapcache/store.h"

namespace snapcache::store {

struct SecondaryAnswer {
  enum class Kind {
    copied,    // the entry is now in the local cache
    absent,    // the secondary store has no entry for the key
    unusable,  // it could not be read, its entry is damaged, or the copy could not be made
  };
  Kind kind = Kind::absent;
  std::string reason;  // one line, naming the secondary store
};

SecondaryAnswer copy_from_secondary(Store& store, const std::string& id);

}  // namespace snapcache::store
