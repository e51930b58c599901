// A tensor over a storage that already exists, made as at::from_blob makes one: a TensorImpl
// on the storage, no allocation and no dispatch. A load makes one per tensor, thousands of them,
// and at::empty({0}, options).set_(storage, ...) goes through the allocator and the dispatcher
// twice for each (3x slower on the CPU; on the GPU machine the upload stage of the 16 GiB demo
// model, 4,585 tensors, spent 20-30 ms outside the engine's own work, 1 ms for 1 GiB's 276).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <cstdint>

namespace snapcache {

// On `storage`'s device. Throws c10::Error when the view would reach past the storage's bytes, or
// has a negative size, stride or offset.
at::Tensor tensor_over(const c10::Storage& storage, at::ScalarType dtype, c10::IntArrayRef sizes,
                       c10::IntArrayRef strides, std::int64_t storage_offset);

}  // namespace snapcache
