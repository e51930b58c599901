#include "torch/tensor_over.h"

#include <c10/core/TensorImpl.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Exception.h>

namespace snapcache {

at::Tensor tensor_over(const c10::Storage& storage, at::ScalarType dtype, c10::IntArrayRef sizes,
                       c10::IntArrayRef strides, std::int64_t storage_offset) {
  TORCH_CHECK(sizes.size() == strides.size(), "a view needs one stride per dimension");
  TORCH_CHECK(storage_offset >= 0, "a view's storage offset is negative");
  // The last element's index plus one, as set_ checks it; an empty view reaches nothing.
  std::int64_t reach = storage_offset + 1;
  bool empty = false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    TORCH_CHECK(sizes[d] >= 0 && strides[d] >= 0, "a view's sizes and strides must not be negative");
    empty |= sizes[d] == 0;
    reach += (sizes[d] - 1) * strides[d];
  }
  const auto item = static_cast<std::int64_t>(c10::elementSize(dtype));
  TORCH_CHECK(empty || reach * item <= static_cast<std::int64_t>(storage.nbytes()), "a view of ", reach * item,
              " bytes reaches past its storage of ", storage.nbytes());
  const c10::DispatchKeySet keys(c10::computeDispatchKey(dtype, c10::kStrided, storage.device()));
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(storage), keys, caffe2::TypeMeta::fromScalarType(dtype));
  impl->set_sizes_and_strides(sizes, strides, storage_offset);
  return at::Tensor(std::move(impl));
}

}  // namespace snapcache
