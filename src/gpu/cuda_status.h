// CUDA errors as a Status: out of memory is no_space (a caller may fall back or free something);
// everything else is io_error with CUDA's own words.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "snapcache/status.h"

namespace snapcache::gpu {

// Clears the runtime's sticky last error, so the next call does not report it again.
Status cuda_status(cudaError_t err, const std::string& what);

}  // namespace snapcache::gpu
