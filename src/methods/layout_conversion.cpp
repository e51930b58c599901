// FP16 and INT8 row-major <-> column-major conversion for the kernels that want it.
#include <optional>
#include <unordered_set>

#include "snapcache/version.h"
#include "methods/built_in_properties.h"
#include "methods/deferred_layout.h"
#include "methods/layout_kernels.h"
#include "methods/named.h"
#include "snapcache/extend/post_load.h"
#include "snapcache/extend/store_tensors.h"
#include "snapcache/text.h"
#include "util/fmt.h"

namespace snapcache {

std::vector<std::string> methods::weight_scale_pairs(const NamedTensors& tensors, at::ScalarType dtype) {
  // A scale usually comes right after its weight; the index of every name is built only when one
  // does not (each method asks for its pairs twice per load, among thousands of names).
  std::optional<std::unordered_set<std::string_view>> names;
  const auto has = [&](std::size_t i, const std::string& scale) {
    if (i + 1 < tensors.size() && tensors[i + 1].first == scale) return true;
    if (!names) {
      names.emplace();
      names->reserve(tensors.size());
      for (const auto& [n, _] : tensors) names->insert(n);
    }
    return names->count(scale) > 0;
  };
  std::vector<std::string> out;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [n, t] = tensors[i];
    if (t.scalar_type() != dtype) continue;
    std::string scale = n + "_scale";
    if (!has(i, scale)) continue;
    out.push_back(n);
    out.push_back(std::move(scale));
  }
  return out;
}

namespace {

class LayoutConversion final : public PostLoadMethod {
 public:
  LayoutConversion(std::vector<std::string> suffixes, WeightLayout layout)
      : suffixes_(std::move(suffixes)), layout_(layout) {}
  // The suffixes are part of the name: two conversions of different tensors are different
  // processing (the GPU retention tier keys prepared weights by it).
  std::string name() const override {
    return fmt::format("layout({}: {})", layout_ == WeightLayout::column_major ? "column-major" : "row-major",
                       fmt::join(suffixes_, ", "));
  }
  std::string version() const override { return kVersion; }  // built in: its output changes only with snapcache

  std::vector<std::string> targets(const NamedTensors& tensors) const override {
    std::vector<std::string> out;
    for (const auto& [n, _] : tensors)
      for (const auto& s : suffixes_)
        if (methods::ends_with(n, s)) {
          out.push_back(n);
          break;
        }
    return out;
  }

  // Results are views of the inputs or fresh contiguous copies; nothing is written in place, and
  // only the targets are read.
  MethodProperties properties() const override {
    return methods::built_in_properties();
  }

  Status apply(NamedTensors& tensors) const override {
    const methods::TensorsByName by_name(tensors);
    for (const auto& name : targets(tensors)) {
      at::Tensor& t = *by_name.find(name);
      if (t.scalar_type() != at::kHalf && t.scalar_type() != at::kChar)
        return Status(StatusCode::unsupported, fmt::format("tensor '{}': layout conversion is for float16 and int8, not {}",
                                                           name, c10::toString(t.scalar_type())));
      if (t.dim() != 2)
        return Status(StatusCode::invalid_argument,
                      fmt::format("tensor '{}': layout conversion needs a 2-d tensor, got {}", name,
                                  format_dims(t.sizes())));
      t = layout_ == WeightLayout::column_major ? methods::column_major(t) : methods::row_major(t);
    }
    return Status::ok();
  }

 private:
  std::vector<std::string> suffixes_;
  WeightLayout layout_;
};

}  // namespace

std::shared_ptr<PostLoadMethod> layout_method(std::vector<std::string> suffixes, WeightLayout layout) {
  return std::make_shared<LayoutConversion>(std::move(suffixes), layout);
}

Status validate_precision(const NamedTensors& tensors, const PrecisionPolicy& policy) {
  for (const auto& [name, t] : tensors) {
    const PrecisionRule* rule = nullptr;
    for (const auto& r : policy.rules)
      if (methods::ends_with(name, r.suffix)) {
        rule = &r;
        break;
      }
    if (rule == nullptr)
      return Status(StatusCode::mismatch,
                    fmt::format("tensor '{}': no rule of precision policy '{}' covers it", name, policy.name));
    auto dtype = to_dtype(t.scalar_type());
    if (!dtype || std::find(rule->allowed.begin(), rule->allowed.end(), *dtype) == rule->allowed.end()) {
      std::vector<std::string_view> allowed;
      for (DType d : rule->allowed) allowed.push_back(dtype_name(d));
      return Status(StatusCode::mismatch,
                    fmt::format("tensor '{}': dtype {} but precision policy '{}' allows {} for '*{}'", name,
                                c10::toString(t.scalar_type()), policy.name, fmt::join(allowed, " or "), rule->suffix));
    }
  }
  return Status::ok();
}

}  // namespace snapcache
