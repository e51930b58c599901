// A copy of a load's host tensors in memory of its own, for a publication to write while the load
// hands the originals out to a caller known to write into them: a plan whose post-load methods may
// write in place, or a key whose caller did so while its tensors were published before (then their
// fingerprint did not hold, Store::publish failed, and the store remembers it). Other CPU loads
// publish the originals by their fingerprint (PublishOptions::expected_chunk_hashes), which costs
// one read of the bytes instead of fresh memory (docs/performance.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapcache/named_tensors.h"
#include "snapcache/status.h"

namespace snapcache::host_path {

// The tensors again, same names, dtypes, shapes, strides, offsets and ties, over one huge-page
// mapping (util/host_memory.h) that goes when the last of them does; each storage's bytes copied
// up to the last one a tensor reaches, on up to `threads` threads. Refuses (no_space, saying how
// much it needed) a copy larger than half the memory the kernel says is available: a publication
// must never be what pushes a server into swap or the OOM killer.
struct HostCopy {
  NamedTensors tensors;
  std::uint64_t bytes = 0;  // copied
};
Result<HostCopy> copy_host_tensors(const NamedTensors& tensors, std::size_t threads);

}  // namespace snapcache::host_path
