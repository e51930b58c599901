// Reading ahead what the post-load methods read, when a hit's entry is not in the page cache.
//
// The post-load methods read their targets on the host, through the entry's private mapping: with
// the page cache dropped each page they touch is a page fault that waits for the disk on its own.
// The demo's methods read a few KiB of scales per layer, and at 16 GiB on the GPU machine those
// faults took 2.24 s, one at a time, before the upload could start (docs/performance.md, sixth
// session). Read ahead in parallel, the same bytes cost what the disk's bandwidth says, and the
// upload engine, which reads the rest itself at the disk's rate, starts that much sooner.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/post_load.h"

namespace snapcache::pipeline {

// Reads into the page cache, in parallel, the stored bytes (HostStorage::file) of the storages the
// methods read: their targets, or every served storage when one of them may read beyond its
// targets (MethodProperties::reads_only_targets). Storages whose sampled pages are all in the page
// cache are skipped. Returns the bytes read. A hint: a method that throws naming its targets, or a
// read that fails, reads nothing more here; the load itself then meets the error where it
// reports it.
std::uint64_t read_ahead_for_post_load(const std::vector<std::shared_ptr<PostLoadMethod>>& methods,
                                       const NamedTensors& tensors, const HostStorages& served);

}  // namespace snapcache::pipeline
