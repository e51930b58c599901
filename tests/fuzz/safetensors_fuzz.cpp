// libFuzzer target: the safetensors header grammar (parse_safetensors_header), which decides
// whether a checkpoint the ordinary loader reads is well formed. The first 8 bytes of an input
// are the data section's size, the rest the header. Parsing must never crash or hang, and what it
// accepts must tile the data section exactly.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "snapcache/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  std::uint64_t data_bytes = 0;
  std::memcpy(&data_bytes, data, 8);
  std::map<std::string, std::string> metadata;
  auto entries = snapcache::parse_safetensors_header(
      std::string_view(reinterpret_cast<const char*>(data) + 8, size - 8), data_bytes, &metadata);
  if (entries) {
    std::uint64_t covered = 0;
    for (const auto& e : *entries) covered += e.end - e.begin;
    if (covered != data_bytes) __builtin_trap();  // accepted, so the tensors tile the data
  }
  return 0;
}
