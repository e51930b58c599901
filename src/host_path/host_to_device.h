// The host path of a load, from served host tensors to device tensors: post-load methods and
// precision checks, the host storages marked with what the methods wrote, then the upload with its
// fallback. A load runs it once on everything a tier served, or part by part while a streaming
// loader still runs (host_path/upload_ahead.h); both take these same steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "methods/deferred_layout.h"
#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/tier.h"
#include "snapcache/extend/uploader.h"
#include "snapcache/pipeline.h"

namespace snapcache::host_path {

// The storages a tier served (its answer's HostStorages), by storage. They are held until the
// load ends: a storage freed by a method could otherwise hand its address to a new one.
class ServedStorages {
 public:
  explicit ServedStorages(const HostStorages& served);
  const HostStorage* find(const c10::StorageImpl* storage) const;
  bool contains(const at::Tensor& t) const { return t.has_storage() && find(t.storage().unsafeGetStorageImpl()); }
  // Where a served storage's bytes also lie, unless a method may have written it.
  const StoredBytes* stored(const c10::StorageImpl* storage) const;
  void written_in_place(const c10::StorageImpl* storage) { written_.insert(storage); }
  bool written(const c10::StorageImpl* storage) const { return written_.count(storage) > 0; }

 private:
  const HostStorages& served_;
  std::unordered_map<const c10::StorageImpl*, const HostStorage*> index_;
  std::unordered_set<const c10::StorageImpl*> written_;
};

// Told, for each post-load method in the plan's order, what it was given and what it targeted.
using MethodObserver =
    std::function<void(std::size_t method, const NamedTensors& given, const std::vector<std::string>& targets)>;

// Post-load methods and precision checks; then the host storages, each marked with whether a
// method wrote it (so an uploader never sends it from a file). With `deferred`, layout
// conversions are left pending for the uploader to write (see methods/deferred_layout.h); a
// method that may read their bytes gets them written first. A method that may write in place must
// not run while a publication still writes its targets: the caller waits for it first.
Result<HostStorages> prepare_on_host(const LoadPlan& plan, LoadReport& report, NamedTensors& tensors,
                                     ServedStorages& served, methods::DeferredLayouts* deferred,
                                     const MethodObserver& observe = {});

// The engine for large loads onto CUDA devices, the plain copy for the rest (which hands CPU
// tensors back as they are).
std::shared_ptr<Uploader> default_uploader(c10::Device device, std::uint64_t bytes);

// The bytes the plan's declared tensors take, each alias group once (at its largest tensor): what
// the upload will move, give or take what post-load methods add.
std::uint64_t declared_bytes(const ExpectedLayout& expected);

// The host path of what a tier served on the host (its storages described: TierAnswer::storages),
// whole: when the tier found part of its files off the page cache, what the post-load
// methods will read, read ahead; post-load and precision (prepare_on_host); the upload with its
// fallback (upload). On a hit the report also says what the upload checked against the checksums
// and what it trusted by the files' identities. The plan's interrupt check is asked before the
// upload.
Result<Uploaded> to_device(const LoadPlan& plan, LoadReport& report, TierAnswer& served);

// Uploads with `uploader`; when that is not the plain copy and fails, the plain copy uploads
// instead and the report's reason says why. A failed upload releases what it allocated. A
// checksum mismatch is never retried by another uploader: the bytes themselves are bad.
Result<Uploaded> upload(const LoadPlan& plan, const std::shared_ptr<Uploader>& uploader, const NamedTensors& tensors,
                        HostStorages& host, methods::DeferredLayouts* deferred, LoadReport& report);

}  // namespace snapcache::host_path
