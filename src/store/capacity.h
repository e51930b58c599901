// Making room for a publication: the capacity and disk-reserve rules (Config), applied by evicting
// least recently used unleased entries. Private to the store: publication calls it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapcache/store.h"

namespace snapcache::store {

// Evicts least-recently-used unleased entries until `needed` more bytes fit under the capacity
// and the reserve, appending their ids to `evicted`; no_space with the reason if they cannot, and
// the failure itself when the cache cannot be measured or listed.
Status make_room(Store& store, std::uint64_t needed, std::vector<std::string>& evicted);

}  // namespace snapcache::store
