// Transposes on a device, by moving bytes: the one way both built-in uploaders (the engine and
// the per-storage copy) write a pending layout conversion (extend/host_storage.h,
// PendingTranspose) once its raw rows are on the device. Our own kernel (gpu/transpose_kernel.h)
// does it on torch's current stream; elements move as whole words of their width, never read as
// numbers (a NaN's payload, a negative zero stay as they are), so the result is bit-identical to a
// host transpose.
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>

#include "snapcache/status.h"

namespace snapcache::gpu {

// `src` holds `rows` whole rows of a row-major matrix of `cols` elements of `element_size` bytes;
// their transpose goes to `dst` as `cols` rows of `rows` elements, destination rows `dst_pitch`
// bytes apart (so that calls for consecutive row blocks fill column blocks of one matrix). Both
// are memory of `device`, aligned to the element size; element sizes are those of torch's dtypes
// (1, 2, 4, 8, 16 bytes).
Status transpose_on_device(std::byte* dst, std::uint64_t dst_pitch, const std::byte* src, std::uint64_t rows,
                           std::uint64_t cols, std::uint64_t element_size, c10::Device device);

}  // namespace snapcache::gpu
