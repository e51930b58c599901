// libFuzzer target: the manifest decoder, the first bytes a lookup reads from a cache directory
// it cannot trust. Decoding must never crash, hang or allocate without bound; what decodes must
// encode back to bytes that decode again.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "format/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)snapcache::format::decode_manifest_head(bytes);
  auto manifest = snapcache::format::decode_manifest(bytes);
  if (manifest) {
    auto again = snapcache::format::decode_manifest(snapcache::format::encode_manifest(*manifest));
    if (!again) __builtin_trap();  // what decodes must survive its own encoding
  }
  return 0;
}
