#include "torch/tensor_over.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Exception.h>

namespace snapcache {

at::Tensor tensor_over(const c10::Storage& storage, at::ScalarType dtype, c10::IntArrayRef sizes,
                       c10::IntArrayRef strides, std::int64_t storage_offset) {
  TORCH_CHECK(sizes.size() == strides.size(), "a view needs one stride per dimension");
  TORCH_CHECK(storage_offset >= 0, "a view's storage offset is negative");
  // The reach rule below returns 0 for any view with an empty dimension, whatever the others say.
  at::detail::check_size_nonnegative(sizes);
  for (const std::int64_t stride : strides) TORCH_CHECK(stride >= 0, "a view's strides must not be negative");
  // torch's own rule for the bytes a view reaches, as set_ checks it (it throws on overflow).
  const std::size_t reach = at::detail::computeStorageNbytes(sizes, strides, c10::elementSize(dtype),
                                                              static_cast<std::size_t>(storage_offset));
  TORCH_CHECK(reach <= storage.nbytes(), "a view of ", reach, " bytes reaches past its storage of ", storage.nbytes());
  const c10::DispatchKeySet keys(c10::computeDispatchKey(dtype, c10::kStrided, storage.device()));
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(storage), keys, caffe2::TypeMeta::fromScalarType(dtype));
  impl->set_sizes_and_strides(sizes, strides, storage_offset);
  return at::Tensor(std::move(impl));
}

}  // namespace snapcache
