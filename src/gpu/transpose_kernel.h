// The one kernel of our own: the transpose of a row-major matrix, moving bytes. Apart from
// device_transpose.cpp (which gives it torch's stream and a Status) nothing calls it. It lives in
// this library's own small module, where torch's strided copy lives in libtorch's: the first
// launch of one of torch's kernels in a process costs milliseconds (the driver finds and loads it
// in a module of hundreds of MiB), which on a small load was most of the conversions' time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace snapcache::gpu {

// Writes the transpose of `rows` rows of `cols` elements of `element_size` bytes at `src` (row
// after row, no gaps) to `dst`, `cols` rows of `rows` elements, destination rows `dst_pitch` bytes
// apart, on `stream`. Element sizes 1, 2, 4, 8 and 16 (every torch dtype); `src`, `dst` and
// `dst_pitch` aligned to the element size. cudaErrorInvalidValue otherwise.
cudaError_t launch_transpose(void* dst, std::uint64_t dst_pitch, const void* src, std::uint64_t rows,
                             std::uint64_t cols, std::uint64_t element_size, cudaStream_t stream);

}  // namespace snapcache::gpu
