// Entries whose data files hold the same bytes share one file, by a second name (a hard link):
// entries are immutable, and every load maps a data file privately, so a name more costs nothing
// and the bytes are on the disk once. Keys differ where the bytes need not (a Torch upgrade that
// changes nothing in the tensors, a loader option that only changes how they are built), and each
// such key would otherwise hold a full copy.
//
// A publication looks for its twins among the entries of the same component and checkpoint (the
// index, store/entry_index.h): an entry whose every data file is trusted (store/entry_check.h), with
// a file of the same size and chunk hashes as one of its own. Equal hashes only nominate: the
// bytes are compared, and only a file proven equal byte for byte is shared. Nothing else is read
// or written; a publication with no twin costs one listing of its index directory.
//
// A new name changes the shared file's ctime, and so does the removal of one, while an entry
// trusts its data file only under the identity (ctime included) it recorded. So whoever adds or
// removes a name re-records, in the verified stamp, the identity of each entry it checked that
// shares the file, when only the ctime moved; an entry it did not check (beyond the first few of
// its component and checkpoint) rehashes the file on its next load and records it then.
//
// Counting: a file of several names is counted once in the cache's size (total_bytes), and not at
// all in what removing one of its entries frees (util/file_io.h: SharedFiles).
#pragma once

#include <cstdint>
#include <string>

#include "snapcache/extend/store_access.h"
#include "snapcache/manifest.h"

namespace snapcache::store {

// Gives each data file of the pending entry at `entry_path` that equals a twin's (above) the twin's
// file instead, and records the new identity in `manifest`. Returns the bytes freed. Best effort:
// a failure leaves the entry its own copy.
std::uint64_t share_identical_data(Store& store, const std::string& entry_path, const std::string& id,
                                   Manifest& manifest);

// Removes the tree of a removed entry in trash/ (`id`'s) that has a file of several names, keeping
// the trust of the entries that share it (above).
Status remove_sharing_tree(Store& store, const std::string& trash_path, const std::string& id);

}  // namespace snapcache::store
