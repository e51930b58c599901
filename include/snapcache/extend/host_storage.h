// The host storages of a load: the bytes behind a set of CPU tensors, grouped once. Publication
// writes each storage once, the uploader allocates and copies each once, and the alias structure
// (tied weights, views) is read from here, so every consumer agrees on it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/extend/stored_file.h"
#include "snapcache/named_tensors.h"

namespace snapcache {

// Bytes a post-load layout conversion has declared but not written: the transpose of `source`, a
// contiguous row-major [rows, cols] matrix, i.e. [cols, rows] row-major. The tensor keeps the
// source's bytes alive and says their shape and element size, so an uploader never holds a bare
// pointer. An uploader that converts layouts (Uploader::traits) writes them where it writes the
// storage (the engine: from its pinned staging buffers; both built-in uploaders transpose on the
// device), so converted weights never take fresh host memory; for any other uploader the load
// writes them into the storage first.
struct PendingTranspose {
  at::Tensor source;
  std::optional<StoredBytes> source_file;  // the source's first byte in a file a tier served from

  std::uint64_t rows() const { return static_cast<std::uint64_t>(source.size(0)); }
  std::uint64_t cols() const { return static_cast<std::uint64_t>(source.size(1)); }
  std::uint64_t element_size() const { return static_cast<std::uint64_t>(source.element_size()); }
  // ok when an uploader can write it into a storage of `storage_bytes`: the source is a defined,
  // contiguous, two-dimensional CPU tensor whose bytes fill that storage exactly.
  SNAPCACHE_API Status check(std::uint64_t storage_bytes) const;
};

struct HostStorage {
  const std::byte* data = nullptr;   // start of the storage
  std::uint64_t nbytes = 0;          // the whole storage
  std::uint64_t used_bytes = 0;      // up to the last byte any tensor of the load reaches
  std::uint64_t alignment = 0;       // largest power of two, at most 4096, that divides `data`
  c10::Storage owner;                // keeps the bytes alive (a mapping, a heap block)
  std::vector<std::size_t> tensors;  // indices of the tensors that view it, in load order
  // A post-load method produced or changed these bytes: they exist only in this process's memory,
  // never in a file the load came from. Declared by the methods (PostLoadMethod::writes).
  bool written_by_post_load = false;
  // Where an uploader may read the bytes instead (see StoredFile): set only for storages a tier
  // served from a file and no method wrote.
  std::optional<StoredBytes> file;
  // Set when the bytes are a pending layout conversion: until the uploader (or the load) writes
  // them, `data` is reserved but unreadable (a read faults instead of returning stale bytes).
  std::optional<PendingTranspose> pending;
};

struct HostStorages {
  std::vector<HostStorage> storages;    // in order of first use
  std::vector<std::uint32_t> storage_of;  // per tensor: index into `storages`
  SNAPCACHE_API std::uint64_t total_bytes() const;  // sum of nbytes
};

// Groups CPU tensors by the storage they view. Fails, naming the tensor, on an undefined,
// non-CPU or non-strided tensor, or one that reaches past the end of its storage.
SNAPCACHE_API Result<HostStorages> describe_host_storages(const NamedTensors& tensors);

// The load's tensors again over `storages` (one per host storage, in the same order, e.g. on a
// device): same dtypes, shapes, strides and storage offsets, so views stay views and tied tensors
// stay tied. What every uploader ends with.
SNAPCACHE_API NamedTensors views_over(const NamedTensors& tensors, const HostStorages& host,
                                      const std::vector<c10::Storage>& storages);

}  // namespace snapcache
