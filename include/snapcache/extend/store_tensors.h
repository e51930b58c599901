// A rank's tensors in the store: publish named CPU tensors, load them back in a later process as
// tensors over a private copy-on-write mapping of the entry (an opened entry is a Snapshot), and
// describe a snapshot's storages with where each lies in its files.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "snapcache/export.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/store_access.h"
#include "snapcache/key.h"
#include "snapcache/manifest.h"
#include "snapcache/pipeline.h"

namespace snapcache {

// The torch this process runs: version, CUDA runtime version, C++ ABI. Part of every Key.
SNAPCACHE_API TorchIdentity current_torch_identity();

SNAPCACHE_API Result<DType> to_dtype(c10::ScalarType type);
SNAPCACHE_API c10::ScalarType to_scalar_type(DType dtype);

// Describes CPU tensors as storages and tensor records. Tensors that share a storage are stored
// once; each storage is stored from its start up to the last byte any tensor uses, so shapes,
// strides and storage offsets come back exactly. Refuses (unsupported, naming the tensor) what it
// cannot represent: non-CPU, quantized, sparse, or conjugate/negative-bit views.
struct CapturedTensors {
  std::vector<StorageSource> storages;
  std::vector<TensorRecord> tensors;
};
SNAPCACHE_API Result<CapturedTensors> capture_tensors(const NamedTensors& tensors);

// The layout `tensors` has, to check a warm load against (names, dtypes, shapes, strides, aliases);
// fails on a tensor a snapshot cannot hold.
SNAPCACHE_API Result<ExpectedLayout> expected_layout_of(const NamedTensors& tensors);

SNAPCACHE_API PublishOutcome publish_tensors(Store& store, const Key& key, const NamedTensors& tensors,
                               const PublishOptions& options = {});

struct LoadedTensors {
  LookupOutcome lookup;  // hit, miss, damaged, fallback or disabled, and why
  NamedTensors tensors;  // on hit: CPU tensors over the entry's private mapping
};

// Looks the key up and, on a hit, checks the entry against `expected` (when given) before
// building tensors. A mismatch counts as a miss, with the reason. Logs one line: hit, miss,
// damaged, fallback or disabled, and why. (The load pipeline uses lookup and tensors_of itself.)
SNAPCACHE_API LoadedTensors load_tensors(Store& store, const Key& key, const ExpectedLayout* expected = nullptr,
                                         VerifyPolicy policy = VerifyPolicy::trust_identity);

// Builds tensors over an opened snapshot; each holds the snapshot (mapping and lease) alive.
SNAPCACHE_API NamedTensors tensors_of(const std::shared_ptr<Snapshot>& snapshot);

// The host storages of tensors_of(snapshot) (`tensors`, in the manifest's order), each with where
// it lies in the snapshot's data files (HostStorage::file), read off the manifest: what the
// snapshot tier serves.
SNAPCACHE_API Result<HostStorages> snapshot_storages(const std::shared_ptr<Snapshot>& snapshot,
                                                     const NamedTensors& tensors);

}  // namespace snapcache
