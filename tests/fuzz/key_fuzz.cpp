// libFuzzer target: the key decoder (key files in misses/, the key inside every manifest).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "snapcache/key.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto key = snapcache::decode_key(std::string_view(reinterpret_cast<const char*>(data), size));
  if (key) {
    auto again = snapcache::decode_key(snapcache::encode_key(*key));
    if (!again || snapcache::key_id(*again) != snapcache::key_id(*key)) __builtin_trap();
  }
  return 0;
}
