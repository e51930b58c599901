// What an adversary does to an archive between export and import (issue 47, item 10): unpack the
// zstd stream, change entries, repack. The checksums still hold, since nothing of the data changes:
// only a signature can tell such an archive from the exported one.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "snapcache/key.h"

namespace snapcache::test {

// The archive with every entry's manifest re-keyed by `rekey` and its id made to match the new key
// (a self-consistent manifest: the checksums and the data are the exported ones). Everything else
// in the stream is kept byte for byte, a signature included. The campaign's forgery is TP rank 1's
// entry re-keyed as rank 0: `[](Key& k) { k.topology.tp_rank = 0; }`.
std::string rekey_archive(const std::string& archive, const std::function<void(Key&)>& rekey);

// An archive's stream (what follows its 20-byte header, decompressed) in its parts, by the grammar
// of src/archive/archive_format.h: the head ('H' to the signer's key; empty in version 1), each
// entry ('E' to its seal, when signed), and the end marker (with its signature, when signed).
struct ArchiveParts {
  std::string head;
  std::vector<std::string> entries;
  std::string end;
};
ArchiveParts split_archive(const std::string& archive);
// An archive with `header`'s 20-byte header (magic, version) around `parts`, compressed again.
std::string join_archive(const std::string& header, const ArchiveParts& parts);

}  // namespace snapcache::test
