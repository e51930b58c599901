#include "pipeline/layout_kernels.h"

#include <ATen/Functions.h>

#include <algorithm>

#include "pipeline/deferred_layout.h"
#include "util/parallel.h"
#include "util/transpose.h"

namespace snapcache::pipeline {
namespace {

// One thread per 4 MiB, at most the worker count: small tensors are not worth a thread.
std::size_t threads_for(const at::Tensor& t) {
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  return std::clamp<std::size_t>(bytes >> 22, 1, util::worker_count());
}

// The transpose of `from` (contiguous, row-major [rows, cols]) as a contiguous [cols, rows]
// tensor: written now, or left to the upload engine when the load defers conversions.
at::Tensor transposed(const at::Tensor& from) {
  if (DeferredLayouts* deferred = DeferredLayouts::current())
    if (auto later = deferred->defer_transpose(from)) return *later;
  const std::int64_t rows = from.size(0), cols = from.size(1);
  at::Tensor to = at::empty({cols, rows}, from.options());
  util::transpose(from.data_ptr(), to.data_ptr(), static_cast<std::size_t>(rows), static_cast<std::size_t>(cols),
                  from.element_size(), threads_for(from));
  return to;
}

}  // namespace

at::Tensor column_major(const at::Tensor& t) {
  at::Tensor tt = t.t();
  if (tt.is_contiguous()) return t;  // contiguous() would hand tt back, and tt.t() is t
  if (t.dim() != 2 || !t.is_contiguous() || !t.device().is_cpu()) return tt.contiguous().t();
  return transposed(t).t();
}

at::Tensor row_major(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  at::Tensor tt = t.dim() == 2 ? t.t() : t;
  if (t.dim() != 2 || !tt.is_contiguous() || !t.device().is_cpu()) return t.contiguous();
  return transposed(tt);  // tt is [cols, rows] row-major over the same bytes
}

}  // namespace snapcache::pipeline
