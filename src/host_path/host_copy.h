// A copy of a load's host tensors in memory of its own, for a publication to write while the load
// hands the originals out. A CPU load's caller may write into the tensors it gets at once (vLLM's
// post-processing copies a converted weight back into its parameter), so a publication that read
// the originals would have to be waited for, at the disk's speed (a 2.0 GiB vLLM entry wrote at
// 0.49 GB/s on the development machine, docs/performance.md).
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
