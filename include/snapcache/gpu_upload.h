// The GPU upload engine: host tensors to CUDA tensors at the speed of the bus. Several threads
// copy storages, in chunks, from wherever they live (a snapshot's mapping, the page cache) into a
// bounded pool of pinned staging buffers, each chunk sent to the device on the thread's own CUDA
// stream as soon as it is staged. The pool is allocated once per process and reused, so pinned
// memory stays within `pinned_bytes` whatever the model's size. All storages of a load share one
// device allocation; aliases stay aliases.
//
// load_model uses it by default for loads of 2 GiB or more onto CUDA devices (below that, pinning
// the staging buffers in a new process costs more than it saves); when it fails (device out of memory, pinned
// memory refused, a CUDA error) the load falls back to the per-storage copy and the report says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "snapcache/export.h"
#include "snapcache/uploader.h"

namespace snapcache {

struct StagedUploadOptions {
  std::uint64_t pinned_bytes = 1ull << 30;  // the staging pool, at most
  std::uint64_t chunk_bytes = 32ull << 20;  // one staging buffer; each worker holds one
  std::size_t threads = 0;                  // 0: the hardware threads, at most 16
};

// An uploader with its own staging pool. Uploaders made with equal options share one pool.
SNAPCACHE_API std::shared_ptr<Uploader> staged_uploader(const StagedUploadOptions& options = {});

}  // namespace snapcache
