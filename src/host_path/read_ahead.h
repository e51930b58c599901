// Reading ahead what the post-load methods read, when a hit's entry is not in the page cache.
//
// The post-load methods read their targets on the host, through the entry's private mapping: with
// the page cache dropped each page they touch is a page fault that waits for the disk on its own.
// The demo's methods read a few KiB of scales per layer, and at 16 GiB on the GPU machine those
// faults took 2.24 s, one at a time, before the upload could start (18 ms read ahead). Read ahead in parallel, the same bytes cost what the disk's bandwidth says, and the
// upload engine, which reads the rest itself at the disk's rate, starts that much sooner.
//
// A load from the checkpoint meets the same faults in its loader: a loader that fuses or converts
// reads the checkpoint's mapping a fault at a time, and with the page cache dropped the demo's
// loader read its 5 GiB of q, k and v at 0.8 GB/s on the GPU machine, where `dd` read the file
// at 2.1 (docs/performance.md). FileReadAhead reads the checkpoint's files
// whole, in file order, on threads of its own while the loader runs, so its faults find the pages
// there.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"

namespace snapcache::host_path {

// Reads into the page cache, in parallel, the stored bytes (HostStorage::file) of the storages the
// methods read: their targets, or every served storage when one of them may read beyond its
// targets (MethodProperties::reads_only_targets). Storages whose sampled pages are all in the page
// cache are skipped. Returns the bytes read. A hint: a method that throws naming its targets, or a
// read that fails, reads nothing more here; the load itself then meets the error where it
// reports it.
std::uint64_t read_ahead_for_post_load(const std::vector<std::shared_ptr<PostLoadMethod>>& post_load,
                                       const NamedTensors& tensors, const HostStorages& served);

// Reads `files` whole into the page cache, in order, from when it is made until stop(): pieces of
// the same size on the same number of threads as the read-ahead above. A hint: a read that fails
// ends it quietly, and the loader meets the error itself.
class FileReadAhead {
 public:
  explicit FileReadAhead(std::vector<std::shared_ptr<const StoredFile>> files);
  ~FileReadAhead();
  FileReadAhead(const FileReadAhead&) = delete;
  FileReadAhead& operator=(const FileReadAhead&) = delete;
  // Hands out no more pieces, waits for those being read, and returns the bytes read.
  std::uint64_t stop();

 private:
  std::vector<std::shared_ptr<const StoredFile>> files_;
  std::atomic<bool> stopped_{false};
  std::atomic<std::uint64_t> bytes_{0};
  std::thread reader_;
};

}  // namespace snapcache::host_path
