#include "methods/layout_kernels.h"

#include <ATen/Functions.h>
#include <ATen/TensorGeometry.h>

#include <algorithm>
#include <array>

#include "methods/deferred_layout.h"
#include "util/parallel.h"
#include "util/transpose.h"

namespace snapcache::methods {
namespace {

// One thread per 4 MiB, at most the worker count: small tensors are not worth a thread.
std::size_t threads_for(const at::Tensor& t) {
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  return std::clamp<std::size_t>(bytes >> 22, 1, util::worker_count());
}

// The transpose of `from` (contiguous, row-major [rows, cols]): its bytes a contiguous
// [cols, rows] matrix, seen through `sizes` and `strides` (that matrix, or its column-major
// transpose). Written now, or left to the upload engine when the load defers conversions.
// Built with its final geometry, not as a tensor then viewed through t(): a load converts
// thousands, and each call through torch's dispatcher costs more than a small transpose.
at::Tensor transposed(const at::Tensor& from, at::IntArrayRef sizes, at::IntArrayRef strides) {
  if (DeferredLayouts* deferred = DeferredLayouts::current())
    if (auto later = deferred->defer_transpose(from, sizes, strides)) return *later;
  at::Tensor to = at::empty_strided(sizes, strides, from.options());
  util::transpose(from.data_ptr(), to.data_ptr(), static_cast<std::size_t>(from.size(0)),
                  static_cast<std::size_t>(from.size(1)), from.element_size(), threads_for(from));
  return to;
}

// Whether t.t() is contiguous (t is 2-D), read off its geometry.
bool transpose_is_contiguous(const at::Tensor& t) {
  const std::array<std::int64_t, 2> sizes{t.size(1), t.size(0)}, strides{t.stride(1), t.stride(0)};
  return at::geometry_is_contiguous(sizes, strides);
}

}  // namespace

at::Tensor column_major(const at::Tensor& t) {
  if (t.dim() == 2 && transpose_is_contiguous(t)) return t;  // contiguous() would hand t.t() back, and its t() is t
  if (t.dim() != 2 || !t.is_contiguous() || !t.device().is_cpu()) return t.t().contiguous().t();
  const std::int64_t rows = t.size(0), cols = t.size(1);
  return transposed(t, {rows, cols}, {1, rows});
}

at::Tensor row_major(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  at::Tensor tt = t.dim() == 2 ? t.t() : t;
  if (t.dim() != 2 || !tt.is_contiguous() || !t.device().is_cpu()) return t.contiguous();
  return transposed(tt, t.sizes(), {t.size(1), 1});  // tt is [cols, rows] row-major over the same bytes
}

}  // namespace snapcache::methods
