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
};

// An upload's result.
struct Uploaded {
  NamedTensors tensors;  // on the device, in the order of the host tensors
  // The bytes of stored files (HostStorage::file, PendingTranspose::source_file) it read and
  // compared with their checksums (StoredFile::check) before handing anything out: the load's
  // report counts them as checked, and the rest of the served files as trusted by identity.
  std::uint64_t bytes_checked = 0;
};

class SNAPCACHE_API Uploader {
 public:
  virtual ~Uploader();
  virtual std::string name() const = 0;
  // What it does for loads onto `device`.
  virtual UploaderTraits traits(c10::Device device) const;
  // Device tensors for `tensors` (whose storages `storages` describes), in the same order, with
  // the same dtypes, shapes, strides and storage offsets; tensors that share a host storage share
  // one device storage. A failure releases what was allocated and says why; bytes that fail their
  // checksums fail it with StatusCode::damaged, and the load then asks the tier that served them
  // to deal with its copy (Tier::damaged).
  virtual Result<Uploaded> upload(const NamedTensors& tensors, const HostStorages& storages, c10::Device device) = 0;
  // Told as a load starts, before any tier is asked, about how many bytes it will upload onto
  // `device` (from the plan's declared layout), so it can make ready what the upload needs while
  // the tiers work: the engine pins its staging buffers on a thread of its own. It must return at
  // once and never fail the load; the upload may be of another size, or never come. The default
  // does nothing.
  virtual void expect(std::uint64_t bytes, c10::Device device);
};

// One device allocation and one host-to-device copy per storage. On a CPU device it hands the
// tensors back as they are.
SNAPCACHE_API std::shared_ptr<Uploader> per_storage_uploader();

}  // namespace snapcache
