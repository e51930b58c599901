#include "pipeline/layout_kernels.h"

#include <ATen/Functions.h>

#include <algorithm>

#include "util/parallel.h"
#include "util/transpose.h"

namespace snapcache::pipeline {
namespace {

// One thread per 4 MiB, at most the worker count: small tensors are not worth a thread.
std::size_t threads_for(const at::Tensor& t) {
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  return std::clamp<std::size_t>(bytes >> 22, 1, util::worker_count());
}

// `to` (contiguous, [cols, rows]) = transpose of the row-major [rows, cols] elements at `from`.
void transpose_into(const at::Tensor& from, at::Tensor& to, std::int64_t rows, std::int64_t cols) {
  util::transpose(from.data_ptr(), to.data_ptr(), static_cast<std::size_t>(rows), static_cast<std::size_t>(cols),
                  from.element_size(), threads_for(from));
}

}  // namespace

at::Tensor column_major(const at::Tensor& t) {
  at::Tensor tt = t.t();
  if (tt.is_contiguous()) return t;  // contiguous() would hand tt back, and tt.t() is t
  if (t.dim() != 2 || !t.is_contiguous() || !t.device().is_cpu()) return tt.contiguous().t();
  const std::int64_t rows = t.size(0), cols = t.size(1);
  at::Tensor out = at::empty({cols, rows}, t.options());
  transpose_into(t, out, rows, cols);
  return out.t();
}

at::Tensor row_major(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  at::Tensor tt = t.dim() == 2 ? t.t() : t;
  if (t.dim() != 2 || !tt.is_contiguous() || !t.device().is_cpu()) return t.contiguous();
  const std::int64_t rows = t.size(0), cols = t.size(1);
  at::Tensor out = at::empty({rows, cols}, t.options());
  transpose_into(tt, out, cols, rows);  // tt is [cols, rows] row-major over the same bytes
  return out;
}

}  // namespace snapcache::pipeline
