// Serving an entry whose checkpoint changed identity but not bytes (store/touched_checkpoint.h).
#include "store/touched_checkpoint.h"

#include <chrono>

#include "snapcache/extend/file_system.h"
#include "store/layout.h"

namespace snapcache::store {

std::optional<SameBytes> entry_with_same_bytes(Store& store, const Key& key, const std::string& id) {
  const auto started = std::chrono::steady_clock::now();
  auto found = read_manifest_key(store.fs(), store.entry_path(id) + "/" + kManifestFile);
  if (!found || found->checkpoint.size() != key.checkpoint.size()) return std::nullopt;
  // Everything but the files' identities equal: the key with the entry's files is the entry's key.
  Key with_entry_files = key;
  with_entry_files.checkpoint = found->checkpoint;
  if (key_id(with_entry_files) != id) return std::nullopt;
  SameBytes same{*found, 0, 0, 0};
  DigestMemo memo = store.digest_memo();
  for (std::size_t i = 0; i < key.checkpoint.size(); ++i) {
    const CheckpointFile& now = key.checkpoint[i];
    const CheckpointFile& then = found->checkpoint[i];
    if (now == then) continue;
    if (now.keyed_by_content() || then.keyed_by_content() || now.path != then.path || now.size != then.size)
      return std::nullopt;
    const std::optional<std::string> made_from = memo.recorded(then);
    if (!made_from) return std::nullopt;
    std::vector<CheckpointFile> current{now};
    if (!memo.fill_digests(current) || current[0].content_digest != *made_from) return std::nullopt;
    ++same.files_changed;
  }
  same.bytes_hashed = memo.bytes_hashed();
  same.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return same;
}

void record_checkpoint_digests(Store& store, const Key& key) {
  std::vector<CheckpointFile> files;
  for (const CheckpointFile& f : key.checkpoint)
    if (!f.keyed_by_content()) files.push_back(f);
  if (files.empty()) return;
  DigestMemo memo = store.digest_memo();
  // File by file, so one that changed or went does not keep the others' digests out; a file no
  // longer as the key describes it (or not there: an entry imported from elsewhere) is not opened.
  for (CheckpointFile& f : files) {
    auto now = describe_checkpoint(store.fs(), {f.path});
    if (!now || now->size() != 1 || !((*now)[0] == f)) continue;
    std::vector<CheckpointFile> one{f};
    (void)memo.fill_digests(one);
  }
}

}  // namespace snapcache::store
