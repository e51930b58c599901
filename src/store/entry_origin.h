// Reading an entry's origin record (format/origin.h). Written once, by the cache that made the
// entry, into its pending directory (store/entry_commit.h); read by `snapcache ls` and `inspect`
// and by a lookup, whose hit names it.
#pragma once

#include <string>

#include "snapcache/extend/file_system.h"
#include "snapcache/manifest.h"

namespace snapcache::store {

// The record in `entry_path`, or EntryOriginKind::unrecorded when there is none or it cannot be
// read as one (then `unreadable` says why, for `inspect`). A record with a second name is not
// trusted: whoever writes the other name would say where the entry came from.
struct OriginRead {
  EntryOrigin origin;
  std::string unreadable;  // empty when the record was read, or there is none
};
OriginRead read_origin(FileSystem& fs, const std::string& entry_path);

}  // namespace snapcache::store
