// An upload with host memory as the device, for CPU tests: every host storage copied, the tensors
// made again over the copies. It keeps no host tensor, so the load holds the host tensors' last
// references, as it does when it uploads to a device.
#pragma once

#include <ATen/Functions.h>

#include <cstring>
#include <vector>

#include "snapcache/extend/host_storage.h"
#include "snapcache/extend/uploader.h"

namespace snapcache::test {

inline Uploaded host_copies(const NamedTensors& tensors, const HostStorages& storages) {
  std::vector<c10::Storage> copies;
  for (const HostStorage& s : storages.storages) {
    at::Tensor bytes = at::empty({static_cast<std::int64_t>(s.nbytes)}, at::kByte);
    if (s.nbytes > 0) std::memcpy(bytes.data_ptr(), s.data, s.nbytes);
    copies.push_back(bytes.storage());
  }
  return Uploaded{views_over(tensors, storages, copies), 0};
}

}  // namespace snapcache::test
