#include "util/hash.h"

#include <xxhash.h>
#ifdef SNAPCACHE_XXH_DISPATCH
// XXH3's one-shot and streaming functions replaced by the library's, which run the widest vector
// code the CPU has (cmake/SnapcacheDependencies.cmake).
#include <xxh_x86dispatch.h>
#endif

#include "util/fmt.h"

namespace snapcache::util {

std::string Hash128::hex() const { return fmt::format("{:016x}{:016x}", high, low); }

std::uint64_t xxh3_64(const void* data, std::size_t size) { return XXH3_64bits(data, size); }

Hash128 xxh3_128(const void* data, std::size_t size) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  return {h.high64, h.low64};
}

Hasher64::Hasher64() : state_(XXH3_createState()) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_)); }
Hasher64::~Hasher64() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Hasher64::update(const void* data, std::size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}
std::uint64_t Hasher64::digest() const {
  return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_));
}

Hasher128::Hasher128() : state_(XXH3_createState()) {
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
Hasher128::~Hasher128() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Hasher128::update(const void* data, std::size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}
Hash128 Hasher128::digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return {h.high64, h.low64};
}

}  // namespace snapcache::util
