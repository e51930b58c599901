// What an adversary does to an archive between export and import (issue 47, item 10): unpack the
// zstd stream, change entries, repack. The checksums still hold, since nothing of the data changes:
// only a signature can tell such an archive from the exported one.
#pragma once

#include <functional>
#include <string>

#include "snapcache/key.h"

namespace snapcache::test {

// The archive with every entry's manifest re-keyed by `rekey` and its id made to match the new key
// (a self-consistent manifest: the checksums and the data are the exported ones). Everything else
// in the stream is kept byte for byte, a signature included. The campaign's forgery is TP rank 1's
// entry re-keyed as rank 0: `[](Key& k) { k.topology.tp_rank = 0; }`.
std::string rekey_archive(const std::string& archive, const std::function<void(Key&)>& rekey);

// The decompressed stream of an archive (what follows its 20-byte header), and an archive with the
// same header around `content`: for tests that cut or splice what an archive says.
std::string archive_content(const std::string& archive);
std::string repack_archive(const std::string& archive, const std::string& content);

}  // namespace snapcache::test
