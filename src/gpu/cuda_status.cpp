#include "gpu/cuda_status.h"

#include "util/fmt.h"

namespace snapcache::gpu {

Status cuda_status(cudaError_t err, const std::string& what) {
  (void)cudaGetLastError();
  return Status(err == cudaErrorMemoryAllocation ? StatusCode::no_space : StatusCode::io_error,
                fmt::format("{}: {}", what, cudaGetErrorString(err)));
}

}  // namespace snapcache::gpu
