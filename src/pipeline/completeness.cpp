// An ordinary load is complete when it gives exactly the tensors the model declares.
#include <set>

#include "pipeline/named.h"
#include "snapcache/pipeline.h"
#include "snapcache/text.h"
#include "util/fmt.h"

namespace snapcache {

Status check_completeness(const NamedTensors& tensors, const ExpectedLayout& expected) {
  std::set<std::string_view> declared;
  for (const auto& e : expected) declared.insert(e.name);
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    if (!seen.insert(name).second) return Status(StatusCode::mismatch, fmt::format("tensor '{}' appears twice", name));
    if (!declared.count(name))
      return Status(StatusCode::mismatch, fmt::format("tensor '{}' is not declared by the model", name));
  }
  for (const auto& e : expected) {
    const at::Tensor* t = pipeline::find(tensors, e.name);
    if (t == nullptr) return Status(StatusCode::mismatch, fmt::format("tensor '{}' is missing", e.name));
    auto dtype = to_dtype(t->scalar_type());
    if (!dtype || *dtype != e.dtype)
      return Status(StatusCode::mismatch, fmt::format("tensor '{}': dtype {} but the model declares {}", e.name,
                                                      c10::toString(t->scalar_type()), dtype_name(e.dtype)));
    if (t->sizes().vec() != e.sizes)
      return Status(StatusCode::mismatch, fmt::format("tensor '{}': shape {} but the model declares {}", e.name,
                                                      format_dims(t->sizes()), format_dims(e.sizes)));
    if (e.strides && t->strides().vec() != *e.strides)
      return Status(StatusCode::mismatch, fmt::format("tensor '{}': strides {} but the model declares {}", e.name,
                                                      format_dims(t->strides()), format_dims(*e.strides)));
  }
  return Status::ok();
}

}  // namespace snapcache
