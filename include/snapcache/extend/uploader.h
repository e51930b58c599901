// The upload seam: turns the host tensors of a load into device tensors. The default copies each
// host storage once (per_storage_uploader); a GPU upload engine plugs in here (LoadPlan::uploader).
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "snapcache/export.h"
#include "snapcache/extend/host_storage.h"

namespace snapcache {

// What an uploader does beyond copying, so the load can rely on it.
struct UploaderTraits {
  // Writes the bytes of storages with a pending layout conversion (HostStorage::pending) itself.
  // Without it, the load writes them into host memory before calling upload.
  bool converts_layouts = false;
  // Reads every chunk of each snapshot data file named by a FileRegion and compares it with the
  // manifest's checksum, failing with StatusCode::damaged before any tensor is handed out.
  bool checks_files = false;
};

class SNAPCACHE_API Uploader {
 public:
  virtual ~Uploader();
  virtual std::string name() const = 0;
  // What it does for loads onto `device`.
  virtual UploaderTraits traits(c10::Device device) const;
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
