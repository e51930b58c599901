// A fingerprint of device memory: XXH3-64 over the XXH3-64 of each 64 MiB piece, computed by
// copying the pieces back through pinned buffers on several threads (hashing on the host keeps
// the library free of kernels of its own; docs/gpu-retention.md has the measured rate).
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapcache/status.h"

namespace snapcache::donor {

Result<std::uint64_t> fingerprint_device_bytes(int device_ordinal, const std::byte* data, std::uint64_t bytes);

}  // namespace snapcache::donor
