// The upload seam: turns the host tensors of a load into device tensors. The default copies each
// host storage once (per_storage_uploader); a GPU upload engine plugs in here (LoadPlan::uploader).
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "snapcache/export.h"
#include "snapcache/host_storage.h"

namespace snapcache {

class SNAPCACHE_API Uploader {
 public:
  virtual ~Uploader();
  virtual std::string name() const = 0;
  // Device tensors for `tensors` (whose storages `storages` describes), in the same order, with
  // the same dtypes, shapes, strides and storage offsets; tensors that share a host storage share
  // one device storage. A failure releases what was allocated and says why.
  virtual Result<NamedTensors> upload(const NamedTensors& tensors, const HostStorages& storages,
                                      c10::Device device) = 0;
};

// One device allocation and one host-to-device copy per storage. On a CPU device it hands the
// tensors back as they are.
SNAPCACHE_API std::shared_ptr<Uploader> per_storage_uploader();

}  // namespace snapcache
