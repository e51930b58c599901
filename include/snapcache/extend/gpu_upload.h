// The GPU upload engine: host tensors to CUDA tensors at the speed of the bus. Several threads
// read the load's bytes (stored files, StoredFile::read through their FileSystem, in whole
// checksum chunks; host memory) into a bounded pool of pinned staging buffers, two per thread (one
// is read into while the other crosses the bus), check every chunk of a snapshot file against its
// manifest checksum on the way (each piece hashed as it is read, StoredFile::read_checked), and
// send each buffer to the device on the thread's own CUDA stream as soon as it is staged. Pending
// layout conversions (the post-load transposes) cross the bus as raw rows and are transposed into
// place on the device. The pool is
// allocated once per process and reused, so pinned memory stays within `pinned_bytes` whatever the
// model's size, and converted weights never take fresh host memory; device memory beyond the
// model's is one staging buffer's worth of scratch per thread while a load with conversions runs.
// All storages of a load share one device allocation; aliases stay aliases.
//
// load_model uses it by default for loads of 64 MiB or more onto CUDA devices (below that, pinning
// the staging buffers in a new process costs more than it saves, and the per-storage copy, which
// writes the conversions on the device as well, serves); when it fails (device out of
// memory, pinned memory refused, a CUDA error) the load writes the pending conversions on the
// host, falls back to the per-storage copy and the report says why. A chunk whose bytes differ
// from its checksum is not retried: the tier that served it deals with its copy (the snapshot tier
// quarantines the entry) and the load loads from the checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "snapcache/export.h"
#include "snapcache/extend/uploader.h"

namespace snapcache {

struct StagedUploadOptions {
  std::uint64_t pinned_bytes = 1ull << 30;  // the staging pool, at most
  // One staging buffer; each worker holds two. A load whose checksum chunks (8 MiB as published)
  // and the matrix rows a transpose reads past them need more gets buffers that fit, in whole 2 MiB
  // huge pages. The default holds one chunk and 2 MiB of rows: pinned memory a worker pins in a new
  // process costs about 0.1 ms per MiB, so a buffer no larger than a unit needs.
  std::uint64_t chunk_bytes = 10ull << 20;
  std::size_t threads = 0;  // 0: one per 64 MiB of load, at least two, at most the hardware threads (16)
  // Write pending layout conversions while staging. Off: the load writes them into host memory
  // first (the slow path in a new process: every converted byte is a fresh page).
  bool convert_layouts = true;
  // Pin the staging buffers a load will need on threads of the engine's own as the load starts
  // (Uploader::expect), while its tiers look up and read, each buffer free for a worker the moment
  // it is pinned; a worker that finds none free pins its own beside them. Off: each worker pins
  // its buffers when the upload starts. Either way a process pins them once.
  bool pin_ahead = true;
};

// An uploader with its own staging pool. Uploaders made with equal options share one pool; a load
// whose chunks or matrix rows need larger buffers than `chunk_bytes` gets a pool of those buffers
// (at most `pinned_bytes` too), kept as long as the uploader.
SNAPCACHE_API std::shared_ptr<Uploader> staged_uploader(const StagedUploadOptions& options = {});

}  // namespace snapcache
