// What identifies a key's checkpoint files: the one rule the entry id, a lookup's comparison and
// key diffs all apply (snapcache/key.h: checkpoint_identity).
#include "snapcache/key.h"

namespace snapcache {

CheckpointFile checkpoint_identity(const CheckpointFile& file) {
  if (!file.keyed_by_content()) return file;
  // The bytes, not their place: a copy at another path, on another device or node, with other
  // times, is the same checkpoint and must find the same entry.
  CheckpointFile identity;
  identity.size = file.size;
  identity.content_digest = file.content_digest;
  return identity;
}

Key key_identity(Key key) {
  for (auto& f : key.checkpoint) f = checkpoint_identity(f);
  return key;
}

}  // namespace snapcache
