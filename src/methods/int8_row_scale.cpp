// INT8 per-row weights: scale (N, 1) -> (N,), optional column-major weight.
#include <algorithm>

#include "snapcache/version.h"
#include "methods/built_in_properties.h"
#include "methods/deferred_layout.h"
#include "methods/layout_kernels.h"
#include "methods/named.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/text.h"
#include "util/fmt.h"

namespace snapcache {
namespace {

class Int8RowScale final : public PostLoadMethod {
 public:
  explicit Int8RowScale(WeightLayout layout) : layout_(layout) {}
  std::string name() const override {
    return layout_ == WeightLayout::column_major ? "int8-row-scale(column-major)" : "int8-row-scale";
  }
  std::string version() const override { return kVersion; }  // built in: its output changes only with snapcache

  std::vector<std::string> targets(const NamedTensors& tensors) const override {
    return methods::weight_scale_pairs(tensors, at::kChar);
  }

  // Results are views of the inputs or fresh contiguous copies; nothing is written in place, and
  // only the targets are read.
  MethodProperties properties() const override {
    return methods::built_in_properties();
  }

  Status apply(NamedTensors& tensors) const override {
    auto t = targets(tensors);
    const methods::TensorsByName by_name(tensors);
    for (std::size_t i = 0; i + 1 < t.size(); i += 2) {
      at::Tensor& w = *by_name.find(t[i]);
      at::Tensor& s = *by_name.find(t[i + 1]);
      if (w.dim() != 2)
        return Status(StatusCode::invalid_argument, fmt::format("tensor '{}': int8 weight must be 2-d, is {}", t[i],
                                                                format_dims(w.sizes())));
      if (s.scalar_type() != at::kFloat || s.dim() != 2 || s.size(0) != w.size(0) || s.size(1) != 1)
        return Status(StatusCode::invalid_argument,
                      fmt::format("tensor '{}': expected a float32 scale of shape ({}, 1), got {} {}", t[i + 1],
                                  w.size(0), c10::toString(s.scalar_type()), format_dims(s.sizes())));
      s = s.reshape({w.size(0)});
      if (layout_ == WeightLayout::column_major) w = methods::column_major(w);
    }
    return Status::ok();
  }

 private:
  WeightLayout layout_;
};

}  // namespace

std::shared_ptr<PostLoadMethod> int8_row_scale_method(WeightLayout weight_layout) {
  return std::make_shared<Int8RowScale>(weight_layout);
}

}  // namespace snapcache
