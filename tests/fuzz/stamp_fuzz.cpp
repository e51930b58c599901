// libFuzzer target: the verification stamp decoder (verified.snap, which decides whether a load
// may skip rehashing).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "format/stamp.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto stamp = snapcache::format::decode_stamp(std::string_view(reinterpret_cast<const char*>(data), size));
  if (stamp && !snapcache::format::decode_stamp(snapcache::format::encode_stamp(*stamp))) __builtin_trap();
  return 0;
}
