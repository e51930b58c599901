#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>

#include "util/fmt.h"

#include "snapcache/extend/store_tensors.h"
#include "snapcache/key.h"

namespace snapcache {

TorchIdentity current_torch_identity() {
  TorchIdentity id;
  id.version = TORCH_VERSION;
  try {
    // The CUDA runtime torch runs with; queried without needing a device.
    long v = at::detail::getCUDAHooks().versionCUDART();
    if (v > 0) id.cuda_version = fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
  } catch (...) {
    id.cuda_version.clear();  // a CPU-only torch
  }
#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI
  id.cxx_abi = "cxx11";
#else
  id.cxx_abi = "pre-cxx11";
#endif
  return id;
}

}  // namespace snapcache
