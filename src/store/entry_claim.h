// An entry held for removal. Making room plans before it evicts: it claims least recently used
// entries until what they hold is enough, and removes them only then, so a publication that can
// never fit evicts nothing. While an entry is claimed no load can lease it, so what the plan
// counted on stays removable; a claim let go (its destructor) leaves the entry as it was.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "snapcache/extend/file_system.h"
#include "snapcache/extend/store_access.h"

namespace snapcache::store {

struct EntryClaim {
  std::string id;
  std::optional<UniqueFd> lease;  // held exclusively; none for a damaged entry that has no lease
  std::uint64_t bytes = 0;        // what removing it frees
};

// Takes the entry's lease exclusively and measures it: busy (naming the holders) if a load or
// another process holds it, not_found if it went meanwhile.
Result<EntryClaim> claim_entry(Store& store, const std::string& id);

// Moves a claimed entry to the trash and removes it; returns the bytes it held.
Result<std::uint64_t> remove_claimed(Store& store, EntryClaim claim);

}  // namespace snapcache::store
