// The GPU upload engine: host tensors to CUDA tensors at the speed of the bus. Several threads
// read the load's bytes (stored files, StoredFile::read through their FileSystem, in whole
// checksum chunks; host memory) into a bounded pool of pinned staging buffers, two per thread (one
// is read into while the other crosses the bus), check every chunk of a snapshot file against its
// manifest checksum on the way (each piece hashed as it is read, StoredFile::read_checked), and
// send each buffer to the device on the thread's own CUDA stream as soon as it is staged. On
// request, a share of each snapshot file crosses the bus straight from the page cache
// (`direct_share`), its chunks hashed where they lie. Pending layout conversions (the post-load
// transposes) cross the bus as raw rows and are transposed into place on the device. On request,
// units the page cache does not hold are read around it (`read_uncached`). The pool is
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
  // Compare every chunk of the snapshot files read with its checksum (it costs ~1% of a warm
  // load; docs/performance.md). Off: bytes are trusted by file identity, as the plain copy does.
  bool check_files = true;
  // Write pending layout conversions while staging. Off: the load writes them into host memory
  // first (the slow path in a new process: every converted byte is a fresh page).
  bool convert_layouts = true;
  // The share of a snapshot file's units sent straight from the page cache: the file mapped
  // read-only and shared, each unit's pages registered with the driver (cudaHostRegister,
  // read-only) while the bus reads them and their chunks are hashed in place, then let go. The
  // rest goes through the pinned buffers; so does everything where the mapping or the
  // registration is refused. Off by default: registering each unit's pages costs more than the
  // copy it saves (16 GiB on the H200 machine: 0.57 s at 0, 0.79 s at 0.4, 1.46 s at 1;
  // docs/performance.md).
  double direct_share = 0;
  // Pin the staging buffers a load will need on threads of the engine's own as the load starts
  // (Uploader::expect), while its tiers look up and read, each buffer free for a worker the moment
  // it is pinned; a worker that finds none free pins its own beside them. Off: each worker pins
  // its buffers when the upload starts. Either way a process pins them once.
  bool pin_ahead = true;
  // Read the units of a snapshot file that the page cache does not hold (fewer than half of the
  // pages sampled in the unit) around it, with O_DIRECT, straight into the pinned buffers
  // (StoredFile::read_checked_uncached): the disk's bytes cross host memory once instead of
  // through the page cache, in 512 KiB reads (one in flight per worker, as fastsafetensors reads),
  // every chunk still checked. Where the file system refuses O_DIRECT, every unit goes through
  // the page cache. Off by default: on the GPU machine's virtual disk the buffered reads were as
  // fast (view-only loads) or faster (12%, the demo's; docs/performance.md, fourteenth session).
  bool read_uncached = false;
  // Read what a load from the checkpoint found untouched in a SafetensorsFile's mapping (the
  // tensors its loader handed on as the file holds them) from the checkpoint file, in units of
  // the runs of bytes they cover, through the FileSystem it was opened with, as a snapshot's files
  // are read, instead of copying them out of the mapping. Off by default: on the GPU machine it was
  // no faster (16 GiB, the demo's loader run whole, page cache warm: the upload took 361-373 ms
  // against 349-356 from the mapping; 1 GiB: the same within 5 ms; with the page cache dropped the
  // read-ahead leaves the upload the page cache either way; docs/performance.md, sixteenth session).
  bool read_checkpoint_files = false;
};

// An uploader with its own staging pool. Uploaders made with equal options share one pool; a load
// whose chunks or matrix rows need larger buffers than `chunk_bytes` gets a pool of those buffers
// (at most `pinned_bytes` too), kept as long as the uploader.
SNAPCACHE_API std::shared_ptr<Uploader> staged_uploader(const StagedUploadOptions& options = {});

}  // namespace snapcache
