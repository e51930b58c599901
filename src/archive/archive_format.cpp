#include "archive/archive_format.h"
#include "snapcache/manifest.h"

namespace snapcache::archive {

bool is_grouped_storage(const Manifest& manifest, std::uint32_t index) {
  bool any = false;
  for (const auto& t : manifest.tensors) {
    if (t.storage != index) continue;
    if (t.dtype != DType::bfloat16 && t.dtype != DType::float16) return false;
    any = true;
  }
  return any;
}

void group_bytes(const std::byte* in, std::byte* out, std::size_t size) {
  const std::size_t pairs = size / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    out[i] = in[2 * i + 1];
    out[pairs + i] = in[2 * i];
  }
  if (size % 2 != 0) out[size - 1] = in[size - 1];
}

void ungroup_bytes(const std::byte* in, std::byte* out, std::size_t size) {
  const std::size_t pairs = size / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    out[2 * i + 1] = in[i];
    out[2 * i] = in[pairs + i];
  }
  if (size % 2 != 0) out[size - 1] = in[size - 1];
}

}  // namespace snapcache::archive
