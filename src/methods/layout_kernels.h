// The post-load layout conversions at memory speed: the same tensors torch's `t().contiguous()`
// and `contiguous()` give (sizes, strides, bytes), built with the blocked, multi-threaded
// transpose instead of a strided element-by-element copy.
#pragma once

#include <ATen/core/Tensor.h>

namespace snapcache::methods {

// t.t().contiguous().t(): the column-major form of a 2-D tensor. A tensor that already is
// column-major comes back as it is, as torch does.
at::Tensor column_major(const at::Tensor& t);
// t.contiguous(): the row-major form.
at::Tensor row_major(const at::Tensor& t);

}  // namespace snapcache::methods
