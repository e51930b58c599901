// A checkpoint whose files changed identity but not bytes: `touch`, a copy over itself, a restore
// from a backup, a checkout that rewrites files. Checkpoint files are keyed by identity (path,
// inode, size, times) so that an unchanged file is never read; a changed identity only says the
// bytes may have changed. So, as the design this project follows does, the changed files are
// checked again: their bytes are hashed (once; the digest is then remembered under the new
// identity as well) and compared with the digests recorded when the entry was published. Same
// bytes: the entry serves the load. Other bytes, or no recorded digest: the miss stands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "snapcache/key.h"
#include "snapcache/store.h"

namespace snapcache::store {

struct SameBytes {
  Key key;                          // the entry's own key, which it is opened under
  std::size_t files_changed = 0;    // files whose identity changed, each found to hold the same bytes
  std::uint64_t bytes_hashed = 0;   // read to prove it (0 when the new identities were known)
  double seconds = 0;
};

// Whether entry `id` can serve `key`: the two keys differ only in the identities of the checkpoint's
// files (the same paths and sizes; everything else equal), and every file that changed identity
// holds the bytes the entry was made from. nullopt otherwise, including when the entry's digests
// were not recorded or a file cannot be read: the miss then stands.
std::optional<SameBytes> entry_with_same_bytes(Store& store, const Key& key, const std::string& id);

// At publication: remembers the digest of each of the key's checkpoint files still as the key
// describes it (a file keyed by content has its digest in the key already). Best effort: a digest
// not recorded only means a touched checkpoint is a miss. Costs one read of the checkpoint, off the
// load's path.
void record_checkpoint_digests(Store& store, const Key& key);

}  // namespace snapcache::store
